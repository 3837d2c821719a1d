package faults_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// partitionedHolder is holder A as its LOCKED line describes it.
type partitionedHolder struct {
	h                *helper
	lockPID, workPID uint32
	tag              string // the application_name prefix of A's work sessions
	settings         string // the work session's client_connection_check_interval and keepalive
	cli              bool   // A is pgadvisory run (see startPartitionedRun), not Manager.Do
	untagged         bool   // the control: A's work is neither tagged nor given the settings
}

// told waits until A says its lock is lost, checks how it says it, and returns when.
func (a partitionedHolder) told(t *testing.T) time.Time {
	t.Helper()
	if a.cli {
		l := a.h.expectContaining(t, "lost while the command ran", 60*time.Second)
		assert.Contains(t, l.text, "the network went silent past the keepalive limit", "the loss is classified")
		return l.at
	}
	l := a.h.expect(t, "LOST", 60*time.Second)
	assert.True(t, strings.HasPrefix(l.text, "LOST lock-lost "), "A's fn ctx ends with the loss as its cause: %s", l.text)
	assert.Contains(t, l.text, "the network went silent past the keepalive limit", "the loss is classified")
	return l.at
}

// done waits for A's end: Do returned the loss, or run exited with its lost-lock code.
func (a partitionedHolder) done(t *testing.T) {
	t.Helper()
	if !a.cli {
		l := a.h.expect(t, "DONE", 30*time.Second)
		assert.True(t, strings.HasPrefix(l.text, "DONE lock-lost "), "A's Do reports the loss: %s", l.text)
		return
	}
	select {
	case <-a.h.exit:
		assert.Equal(t, runExitLost, a.h.cmd.ProcessState.ExitCode(), "run exits with the lost-lock code")
	case <-time.After(30 * time.Second):
		t.Fatal("pgadvisory run did not exit within 30 s of the loss")
	}
}

// startPartitionedHolder starts holder A in the namespace and returns once its work's
// transaction has inserted its marker and sleeps.
func startPartitionedHolder(t *testing.T, name string) partitionedHolder {
	return startHolderInNamespace(t, name, false)
}

// startUntaggedHolder is startPartitionedHolder for the control whose work is neither
// tagged nor given the settings (see partitionedWork).
func startUntaggedHolder(t *testing.T, name string) partitionedHolder {
	return startHolderInNamespace(t, name, true)
}

func startHolderInNamespace(t *testing.T, name string, untagged bool) partitionedHolder {
	t.Helper()
	dsn := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", netLab.serverIP, srv.Port())
	env := map[string]string{"ADVISORY_FAULT_DSN": dsn, "ADVISORY_FAULT_KEY": name}
	if untagged {
		env["ADVISORY_FAULT_UNTAGGED"] = "1"
	}
	h := startHelper(t, "partwork", env, "ip", "netns", "exec", netLab.ns)
	f := strings.Fields(h.expect(t, "LOCKED", 30*time.Second).text)
	require.Len(t, f, 6, "LOCKED <lock pid> <work pid> <tag> <check interval> <keepalive>")
	lockPID, _ := strconv.ParseUint(f[1], 10, 32)
	workPID, _ := strconv.ParseUint(f[2], 10, 32)
	a := partitionedHolder{h: h, lockPID: uint32(lockPID), workPID: uint32(workPID), tag: f[3], untagged: untagged,
		settings: "client_connection_check_interval=" + f[4] + ", keepalive " + f[5]}
	if !untagged {
		require.NotEqual(t, "0", f[4], "the work's options reached its session: client_connection_check_interval is set")
	}
	require.EqualValues(t, a.lockPID, holderOf(t, advisory.KeyOf(name)), "A's lock session holds the lock")
	waitWorkSleeps(t, a.workPID)
	return a
}

// waitWorkSleeps waits until A's work session runs its pg_sleep, its marker inserted
// (the transaction has an xid).
func waitWorkSleeps(t *testing.T, pid uint32) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep%' AND backend_xid IS NOT NULL`, pid).Scan(&n))
		return n == 1
	}, 10*time.Second, time.Millisecond, "A's work transaction sleeps")
}

// runPartitionedHolder is holder A: Manager.Do with the tight keepalive profile; fn runs
// its work on a pool tagged with Lock.WorkConfig. It prints "LOCKED <lock pid> <work pid>
// <tag> <check interval> <idle/interval/count/user timeout>" (the work session's
// settings) once the work's transaction has inserted its marker, "LOST <kind> <cause>" the
// moment fn's ctx ends, and "DONE <kind> <error>" when Do returns; kind is lock-lost when
// the error wraps ErrLockLost.
func runPartitionedHolder() int {
	ctx := context.Background()
	dsn := os.Getenv("ADVISORY_FAULT_DSN")
	m, err := advisory.New(ctx, dsn, profiles["tight"]...)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	err = m.Do(ctx, os.Getenv("ADVISORY_FAULT_KEY"), func(ctx context.Context) error {
		return partitionedWork(ctx, dsn, os.Getenv("ADVISORY_FAULT_UNTAGGED") != "")
	})
	fmt.Println("DONE", lossKind(err), err)
	return 0
}

// workSQL is A's work: one transaction in one Query message, as a migration tool sends
// a migration file, so the server runs it to its COMMIT without another word from the
// client. The marker is the session's application_name.
const workSQL = "BEGIN; INSERT INTO " + workMarkers + " (holder) VALUES (current_setting('application_name')); " +
	"SELECT pg_sleep(%d); COMMIT"

// workSettingsSQL reports the work session: its pid and the settings that end it when
// its client is gone.
const workSettingsSQL = "SELECT pg_backend_pid(), current_setting('client_connection_check_interval'), " +
	"concat_ws('/', current_setting('tcp_keepalives_idle'), current_setting('tcp_keepalives_interval'), " +
	"current_setting('tcp_keepalives_count'), current_setting('tcp_user_timeout'))"

// partitionedWork runs A's work on a pool tagged for its holding; untagged (the control
// of the time before work fencing), on a plain pool whose sessions are named
// pgadv-untagged/PID, with a shorter sleep that ends while the next holder works.
func partitionedWork(ctx context.Context, dsn string, untagged bool) error {
	l := advisory.LockFromContext(ctx)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	tag, sleep := l.WorkAppName(""), workSleep
	if untagged {
		tag, sleep = fmt.Sprintf("pgadv-untagged/%d", os.Getpid()), untaggedWorkSleep
		cfg.ConnConfig.RuntimeParams["application_name"] = tag
	} else {
		l.WorkConfig(&cfg.ConnConfig.Config)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // not closed: Close waits for the acquired connection
	if err != nil {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	var workPID uint32
	var check, keepalive string
	if err := conn.QueryRow(ctx, workSettingsSQL).Scan(&workPID, &check, &keepalive); err != nil {
		return err
	}
	told := make(chan struct{})
	go func() {
		<-ctx.Done()
		fmt.Println("LOST", lossKind(context.Cause(ctx)), context.Cause(ctx))
		close(told)
	}()
	fmt.Println("LOCKED", l.PID(), workPID, tag, check, keepalive)
	_, err = conn.Exec(ctx, fmt.Sprintf(workSQL, int(sleep.Seconds())))
	if ctx.Err() != nil {
		<-told // LOST before DONE: Do returns as soon as fn does
	}
	return err
}

func lossKind(err error) string {
	if errors.Is(err, advisory.ErrLockLost) {
		return "lock-lost"
	}
	return "other"
}
