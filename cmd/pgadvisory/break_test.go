package main_test

import (
	"context"
	"fmt"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// holders is what pg_locks says of key: the pids that hold it.
func holders(t testing.TB, key advisory.Key) []uint32 {
	t.Helper()
	pids, err := pgtest.Holders(context.Background(), dsn(t), int64(key))
	require.NoError(t, err)
	return pids
}

// rawHolder takes key on a plain connection of its own (a holder that is not this
// library) with application_name app, and returns the connection and its backend pid.
func rawHolder(t testing.TB, dsn string, key advisory.Key, shared bool, app string) (*pgx.Conn, uint32) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), pgtest.WithPairs(dsn, "application_name="+app))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	fn := "pg_advisory_lock"
	if shared {
		fn = "pg_advisory_lock_shared"
	}
	var pid uint32
	require.NoError(t, conn.QueryRow(context.Background(),
		"SELECT pg_backend_pid() FROM (SELECT "+fn+"($1)) l", int64(key)).Scan(&pid))
	return conn, pid
}

// TestBreakYesTerminatesARunHolder: a pgadvisory run process holds the lock; break
// --name --yes terminates its session, the lock is free, and run stops its command (76).
func TestBreakYesTerminatesARunHolder(t *testing.T) {
	t.Parallel()
	key := advisory.KeyOf(t.Name())
	holder := start(t, "run", "--name", t.Name(), "--holder-name", "stuck-job", "--", "sleep", "600")
	var pid uint32
	require.Eventually(t, func() bool {
		pids := holders(t, key)
		if len(pids) == 1 {
			pid = pids[0]
		}
		return len(pids) == 1
	}, 20*time.Second, 10*time.Millisecond)

	r := cli(t, "break", "--name", t.Name(), "--yes")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "stuck-job", "the holder is shown")
	assert.Contains(t, r.stdout, "terminated backend pid "+strconv.Itoa(int(pid)))
	assert.Contains(t, r.stdout, "is free now")
	assert.Empty(t, holders(t, key), "pg_locks after the break")
	assert.Equal(t, 76, wait(t, holder).code, "run was told the lock was lost")
}

// TestBreakByKeySparesWaiters: the waiter is shown, not terminated, and takes the lock;
// break says so.
func TestBreakByKeySparesWaiters(t *testing.T) {
	t.Parallel()
	key := advisory.KeyOf(t.Name())
	_, holderPID := rawHolder(t, dsn(t), key, false, "old-holder")
	waiter, err := pgx.Connect(context.Background(), pgtest.WithPairs(dsn(t), "application_name=next-in-line"))
	require.NoError(t, err)
	defer waiter.Close(context.Background())
	var waiterPID uint32
	require.NoError(t, waiter.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&waiterPID))
	got := make(chan error, 1)
	go func() {
		_, err := waiter.Exec(context.Background(), "SELECT pg_advisory_lock($1)", int64(key))
		got <- err
	}()
	m, _ := holdLock(t, t.Name()+"-other", "")
	waitForWaiter(t, m, t.Name(), "next-in-line")

	r := cli(t, "break", "--key", strconv.FormatInt(int64(key), 10), "--yes")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	t.Logf("pgadvisory break --key %d --yes:\n%s", key, r.stdout)
	assert.Regexp(t, `waiting\s+`+strconv.Itoa(int(waiterPID))+`\s+next-in-line`, r.stdout, "the waiter is shown")
	assert.Contains(t, r.stdout, "1 waiting session(s) will not be terminated")
	assert.Contains(t, r.stdout, "terminated backend pid "+strconv.Itoa(int(holderPID)))
	assert.Contains(t, r.stdout, "is now held by backend pid "+strconv.Itoa(int(waiterPID)))
	assert.Contains(t, r.stdout, "(a new holder)")
	require.NoError(t, <-got, "the waiter got the lock, unharmed")
	assert.Equal(t, []uint32{waiterPID}, holders(t, key))
}

func TestBreakNothingHeld(t *testing.T) {
	t.Parallel()
	r := cli(t, "break", "--name", t.Name(), "--yes")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Contains(t, r.stderr, "nothing to break: no session holds lock")
	assert.Contains(t, r.stdout, fmt.Sprintf(`no advisory lock with key %d (name "%s") is held or awaited`,
		advisory.KeyOf(t.Name()), t.Name()), "says which lock it looked for")
}

// TestBreakNeedsATerminalOrYes: with stdin not a terminal and no --yes, break refuses
// and the holder keeps the lock.
func TestBreakNeedsATerminalOrYes(t *testing.T) {
	t.Parallel()
	key := advisory.KeyOf(t.Name())
	_, pid := rawHolder(t, dsn(t), key, false, "keeps-it")
	r := cli(t, "break", "--name", t.Name())
	assert.Equal(t, 5, r.code, r.stderr)
	assert.Contains(t, r.stderr, "not a terminal")
	assert.Contains(t, r.stderr, "--yes")
	assert.Equal(t, []uint32{pid}, holders(t, key))
}

// TestBreakAsksOnATerminal: "n" declines (exit 4, still held), "yes" terminates.
func TestBreakAsksOnATerminal(t *testing.T) {
	t.Parallel()
	key := advisory.KeyOf(t.Name())
	_, pid := rawHolder(t, dsn(t), key, false, "asked-about")
	for _, tc := range []struct {
		answer string
		code   int
		held   []uint32
	}{{"n\n", 4, []uint32{pid}}, {"YES\n", 0, nil}} {
		master, slave := openPTY(t)
		p := startStdin(t, slave, []string{"DATABASE_URL=" + dsn(t)}, bin, "break", "--name", t.Name())
		p.stderr.waitFor(t, "Terminate this backend with pg_terminate_backend? [y/N] ", 30*time.Second)
		_, err := master.WriteString(tc.answer)
		require.NoError(t, err)
		r := wait(t, p)
		assert.Equal(t, tc.code, r.code, "answer %q: %s", tc.answer, r.stderr)
		assert.ElementsMatch(t, tc.held, holders(t, key), "answer %q", tc.answer)
	}
}

// TestBreakSharedHoldersAndHostileName: every holder of a shared lock is shown and
// terminated; a hostile name is printed escaped.
func TestBreakSharedHoldersAndHostileName(t *testing.T) {
	t.Parallel()
	name := nasty + t.Name()
	key := advisory.KeyOf(name)
	m, err := advisory.New(context.Background(), pgtest.WithPairs(dsn(t), "application_name="+nasty))
	require.NoError(t, err)
	defer m.Close()
	a, err := m.LockShared(context.Background(), name)
	require.NoError(t, err)
	b, err := m.LockShared(context.Background(), name)
	require.NoError(t, err)
	require.Len(t, holders(t, key), 2)

	r := cli(t, "break", "--name", name, "--yes")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assertTerminalSafe(t, r.stdout)
	assertTerminalSafe(t, r.stderr)
	assert.Contains(t, r.stdout, nastyEscaped+t.Name())
	for _, l := range []*advisory.Lock{a, b} {
		assert.Contains(t, r.stdout, "terminated backend pid "+strconv.Itoa(int(l.PID())))
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatal("a holder was not told")
		}
	}
	assert.Empty(t, holders(t, key))
}

// TestBreakSaysWhenTheHolderWillNotGo: a holder whose backend is stopped (SIGSTOP) cannot
// act on the termination; break gives up after --wait with exit 75, and the lock is freed
// once the backend runs again.
func TestBreakSaysWhenTheHolderWillNotGo(t *testing.T) {
	t.Parallel()
	dsn(t)
	if srv.Kind() != "local" {
		t.Skip("stops a backend process: needs the local harness server")
	}
	key := advisory.KeyOf(t.Name())
	_, pid := rawHolder(t, dsn(t), key, false, "frozen")
	require.NoError(t, syscall.Kill(int(pid), syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(int(pid), syscall.SIGCONT) })

	r := cli(t, "break", "--name", t.Name(), "--yes", "--wait", "300ms")
	assert.Equal(t, 75, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, "terminated backend pid "+strconv.Itoa(int(pid)))
	assert.Contains(t, r.stderr, "still held by a terminated backend after 300ms")
	assert.Equal(t, []uint32{pid}, holders(t, key))

	require.NoError(t, syscall.Kill(int(pid), syscall.SIGCONT))
	require.Eventually(t, func() bool { return len(holders(t, key)) == 0 }, 20*time.Second, 10*time.Millisecond)
}
