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
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// partitionedHolder is holder A as its LOCKED line describes it.
type partitionedHolder struct {
	h                *helper
	lockPID, workPID uint32
	tag              string // the application_name prefix of A's work sessions
	settings         string // the work session's client_connection_check_interval and keepalive
}

// startPartitionedHolder starts holder A in the namespace and returns once its work's
// transaction has inserted its marker and sleeps.
func startPartitionedHolder(t *testing.T, name string) partitionedHolder {
	t.Helper()
	dsn := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable", netLab.serverIP, srv.Port())
	h := startHelper(t, "partwork", map[string]string{"ADVISORY_FAULT_DSN": dsn, "ADVISORY_FAULT_KEY": name},
		"ip", "netns", "exec", netLab.ns)
	f := strings.Fields(h.expect(t, "LOCKED", 30*time.Second).text)
	require.Len(t, f, 6, "LOCKED <lock pid> <work pid> <tag> <check interval> <keepalive>")
	lockPID, _ := strconv.ParseUint(f[1], 10, 32)
	workPID, _ := strconv.ParseUint(f[2], 10, 32)
	a := partitionedHolder{h: h, lockPID: uint32(lockPID), workPID: uint32(workPID), tag: f[3],
		settings: "client_connection_check_interval=" + f[4] + ", keepalive " + f[5]}
	require.NotEqual(t, "0", f[4], "the work's options reached its session: client_connection_check_interval is set")
	require.EqualValues(t, a.lockPID, holderOf(t, advisory.KeyOf(name)), "A's lock session holds the lock")
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity
			WHERE pid = $1 AND state = 'active' AND query LIKE '%pg_sleep%'`, a.workPID).Scan(&n))
		return n == 1
	}, 10*time.Second, time.Millisecond, "A's work transaction sleeps")
	return a
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
		return partitionedWork(ctx, dsn)
	})
	fmt.Println("DONE", lossKind(err), err)
	return 0
}

func partitionedWork(ctx context.Context, dsn string) error {
	l := advisory.LockFromContext(ctx)
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return err
	}
	l.WorkConfig(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg) // not closed: Close waits for the acquired connection
	if err != nil {
		return err
	}
	tx, err := pool.Begin(ctx)
	if err != nil {
		return err
	}
	var workPID uint32
	var check, keepalive string
	tag := l.WorkAppName("")
	if err := tx.QueryRow(ctx, "INSERT INTO "+workMarkers+" (holder) VALUES ($1) RETURNING pg_backend_pid(), "+
		"current_setting('client_connection_check_interval'), concat_ws('/', current_setting('tcp_keepalives_idle'), "+
		"current_setting('tcp_keepalives_interval'), current_setting('tcp_keepalives_count'), current_setting('tcp_user_timeout'))",
		tag).Scan(&workPID, &check, &keepalive); err != nil {
		return err
	}
	go func() {
		<-ctx.Done()
		fmt.Println("LOST", lossKind(context.Cause(ctx)), context.Cause(ctx))
	}()
	fmt.Println("LOCKED", l.PID(), workPID, tag, check, keepalive)
	if _, err := tx.Exec(ctx, "SELECT pg_sleep($1)", workSleep.Seconds()); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

func lossKind(err error) string {
	if errors.Is(err, advisory.ErrLockLost) {
		return "lock-lost"
	}
	return "other"
}
