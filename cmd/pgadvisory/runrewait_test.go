package main_test

import (
	"context"
	"errors"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// Issue 44 item 7: a wait whose connection is lost (pg_terminate_backend of the waiting
// backend, a server restart, a failover) made run exit 69. It reconnects within
// --connect-timeout, counted from the loss, waits again and runs CMD.

// TestRunWaitRidesOutATerminatedBackend: the waiting backend is terminated while the
// test's Manager holds the lock, twice (the library's Lock tries once more by itself after
// a first loss, and returns the second); run reconnects, waits again (a new backend
// waits), and runs CMD once the holder releases.
func TestRunWaitRidesOutATerminatedBackend(t *testing.T) {
	t.Parallel()
	m, l := holdLock(t, t.Name(), "")
	// A password in the string (the harness's server trusts loopback, so it is unused; a
	// server of ADVISORY_TEST_DSN keeps its own): never printed.
	cfg, err := pgconn.ParseConfig(dsn(t))
	require.NoError(t, err)
	secret, url := cfg.Password, dsn(t)
	if secret == "" {
		secret, url = "s3cret-rewait", pgtest.WithPairs(url, "password=s3cret-rewait")
	}
	env := []string{"DATABASE_URL=" + url}
	p := startEnv(t, env, "run", "--name", t.Name(), "--holder-name", t.Name(), "--connect-timeout", "30s",
		"--", "sh", "-c", "echo ran")
	last := terminateWaiterTwice(t, m, t.Name())
	p.stderr.waitFor(t, "waiting for lock \""+t.Name()+"\" again", 30*time.Second)
	waitingPID(t, m, t.Name(), t.Name(), last)

	require.NoError(t, l.Unlock(context.Background()))
	r := wait(t, p)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "ran\n", r.stdout)
	assert.Contains(t, r.stderr, "lost the connection while waiting for lock \""+t.Name()+"\"")
	assert.Contains(t, r.stderr, "57P01")
	assert.Contains(t, r.stderr, "reconnecting for up to 30s (--connect-timeout)")
	assert.Contains(t, r.stderr, "acquired lock \""+t.Name()+"\" after waiting")
	assert.NotContains(t, r.stderr, secret)
	assertTerminalSafe(t, r.stderr)
}

// TestRunWaitRidesOutAServerRestart: the server restarts (fast shutdown: every session
// ends, the holder's too) while run waits; run retries with backoff until the server is
// back, then takes the lock and runs CMD. Not parallel: it restarts the package's server,
// and no parallel test runs while a sequential one does.
func TestRunWaitRidesOutAServerRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: restarts the server")
	}
	m, _ := holdLock(t, t.Name(), "")
	p := start(t, "run", "--name", t.Name(), "--holder-name", t.Name(), "--connect-timeout", "30s",
		"--", "sh", "-c", "echo ran")
	waitingPID(t, m, t.Name(), t.Name(), 0)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	restarted := time.Now()
	err := srv.Restart(ctx)
	if errors.Is(err, pgtest.ErrNoRestart) {
		t.Skip(err)
	}
	require.NoError(t, err)
	r := wait(t, p)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "ran\n", r.stdout)
	assert.Contains(t, r.stderr, "lost the connection while waiting for lock \""+t.Name()+"\"")
	t.Logf("CMD ran %v after the restart began; stderr:\n%s", time.Since(restarted).Round(time.Millisecond), r.stderr)
}

// TestRunWaitRidesOutAPoolerRestart: run waits through PgBouncer (session mode) for a
// lock held directly; PgBouncer is stopped (SIGTERM: every connection closed at once) and
// started again on its port. run says that the wait lost its connection, retries until
// PgBouncer is back, waits again behind the same holder, and runs CMD once it releases.
func TestRunWaitRidesOutAPoolerRestart(t *testing.T) {
	t.Parallel()
	m, l := holdLock(t, t.Name(), "")
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolSession)
	p := startEnv(t, []string{"DATABASE_URL=" + b.DSN()}, "run", "--name", t.Name(), "--holder-name", t.Name(),
		"--connect-timeout", "30s", "--", "sh", "-c", "echo ran")
	first := waitingPID(t, m, t.Name(), t.Name(), 0)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, b.Stop(ctx, syscall.SIGTERM))
	p.stderr.waitFor(t, "lost the connection while waiting for lock \""+t.Name()+"\"", 30*time.Second)
	require.NoError(t, b.Start(ctx))
	p.stderr.waitFor(t, "waiting for lock \""+t.Name()+"\" again", 30*time.Second)
	waitingPID(t, m, t.Name(), t.Name(), first)

	require.NoError(t, l.Unlock(context.Background()))
	r := wait(t, p)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, "ran\n", r.stdout)
	t.Logf("stderr:\n%s", r.stderr)
}

// TestRunWaitGivesUpAfterConnectTimeout: with --connect-timeout 0 (one attempt), a lost
// wait still exits 69 at once, as before; --no-wait is unchanged (it never waits).
func TestRunWaitGivesUpAfterConnectTimeout(t *testing.T) {
	t.Parallel()
	m, _ := holdLock(t, t.Name(), "")
	p := start(t, "run", "--name", t.Name(), "--holder-name", t.Name(), "--connect-timeout", "0",
		"--", "sh", "-c", "echo ran")
	terminateWaiterTwice(t, m, t.Name())
	r := wait(t, p)
	require.Equal(t, 69, r.code, r.stderr)
	assert.Empty(t, r.stdout)
	assert.NotContains(t, r.stderr, "reconnecting")
}

// terminateWaiterTwice terminates the backend that waits for the lock name (run with
// --holder-name name), then the one its Lock call waits on next; it returns the second.
func terminateWaiterTwice(t testing.TB, m *advisory.Manager, name string) uint32 {
	t.Helper()
	var pid uint32
	for range 2 {
		pid = waitingPID(t, m, name, name, pid)
		var ok bool
		require.NoError(t, adminQuery(t, "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&ok))
		require.True(t, ok)
	}
	return pid
}

// waitingPID waits until a backend other than not, with application_name app, waits
// for name, and returns its pid.
func waitingPID(t testing.TB, m *advisory.Manager, name, app string, not uint32) uint32 {
	t.Helper()
	var pid uint32
	require.Eventually(t, func() bool {
		hs, err := m.Holders(context.Background(), name)
		if err != nil && strings.Contains(err.Error(), "advisory:") {
			return false // the server may be restarting
		}
		for _, h := range hs {
			if !h.Granted && h.ApplicationName == app && h.PID != not {
				pid = h.PID
				return true
			}
		}
		return false
	}, 30*time.Second, 5*time.Millisecond, "%q never waited for by %q", name, app)
	return pid
}
