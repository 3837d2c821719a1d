package advisory_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// A shared session that holds nothing rests open for a while before it goes back to the
// pool, so that a call after another does not open and close a session each time; a call
// that needs a connection while the Manager pins every one takes a resting session's at
// once.

// TestSharedSessionRestsBeforeItGoesBack: the next Lock within the rest takes its lock on
// the same session; after the rest the session goes back to the pool, holding nothing.
func TestSharedSessionRestsBeforeItGoesBack(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	m := newManager(t, []string{"pool_max_conns=2"}, advisory.WithSharedSessions(8),
		advisory.WithHostLingerForTest(time.Hour))
	a, err := m.Lock(ctx, name+"/a")
	require.NoError(t, err)
	require.True(t, a.SharesSession())
	pid := a.PID()
	require.NoError(t, a.Unlock(ctx))
	requireFree(t, a.Key())
	assert.EqualValues(t, 1, m.Stat().AcquiredConns(), "the emptied shared session rests")
	for i := range 3 {
		l, err := m.TryLock(ctx, name+"/b")
		require.NoError(t, err)
		require.Equal(t, pid, l.PID(), "call %d: on the resting session", i)
		requireHeldBy(t, l.Key(), pid)
		require.NoError(t, l.Unlock(ctx))
		requireFree(t, l.Key())
	}
	assert.EqualValues(t, 1, m.Stat().AcquiredConns())
	m.Close()
	assert.EqualValues(t, 0, m.Stat().AcquiredConns(), "Close ends a resting session")

	// With the library's rest, the session goes back by itself.
	m = newManager(t, []string{"pool_max_conns=2"}, advisory.WithSharedSessions(8))
	began := time.Now()
	l, err := m.Lock(ctx, name+"/c")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	requireNoAcquired(t, m)
	assert.GreaterOrEqual(t, time.Since(began), advisory.HostLinger, "back to the pool before its rest ended")
	assert.EqualValues(t, 1, m.Stat().IdleConns(), "pooled, not closed")
}

// TestRestingSharedSessionGivesItsConnection: with the pool's only connection resting as
// an idle shared session, a try of a lock that cannot share (a Pair's) and a Session get
// the connection at once, not ErrPoolExhausted or a wait for the rest's end; a shared
// Lock after them opens a session again.
func TestRestingSharedSessionGivesItsConnection(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	m := newManager(t, []string{"pool_max_conns=1"}, advisory.WithSharedSessions(8),
		advisory.WithHostLingerForTest(time.Hour))
	rest := func() {
		t.Helper()
		l, err := m.Lock(ctx, name+"/shared")
		require.NoError(t, err)
		require.True(t, l.SharesSession())
		require.NoError(t, l.Unlock(ctx))
		require.EqualValues(t, 1, m.Stat().AcquiredConns(), "the emptied shared session rests")
	}

	rest()
	p := advisory.Pair{Class: 7, Object: 11}
	l, err := m.TryLockPair(ctx, p)
	require.NoError(t, err, "a try that needs the resting session's connection")
	require.False(t, l.SharesSession())
	var holder uint32
	require.NoError(t, admin.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND objsubid = 2 AND classid = 7 AND objid = 11`).Scan(&holder))
	require.Equal(t, l.PID(), holder, "the Pair's lock is held by its session")
	require.NoError(t, l.Unlock(ctx))

	rest()
	short, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	s, err := m.Session(short)
	require.NoError(t, err, "a Session that needs the resting session's connection")
	require.NoError(t, s.Lock(ctx, name+"/s"))
	require.NoError(t, s.Close(ctx))

	rest()
	m.Close()
	require.Zero(t, m.Stat().AcquiredConns())
}

// lockOnTheOnlyConnection returns a Manager whose pool has one connection and whose
// emptied shared sessions rest an hour, and a Lock of t.Name() held on its shared session.
func lockOnTheOnlyConnection(t *testing.T, ctx context.Context) (*advisory.Manager, *advisory.Lock) {
	t.Helper()
	m := newManager(t, []string{"pool_max_conns=1"}, advisory.WithSharedSessions(8),
		advisory.WithHostLingerForTest(time.Hour))
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	require.True(t, l.SharesSession())
	return m, l
}

// TestWaitingCallTakesTheSessionThatWouldRest: a call already waiting for a connection
// (the pool's only one is a shared session's) when that session empties gets the
// connection at once: the session does not rest while calls wait (its rest here is an
// hour; the Session's ctx 10 s).
func TestWaitingCallTakesTheSessionThatWouldRest(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m, l := lockOnTheOnlyConnection(t, ctx)
	opened := make(chan error, 1)
	go func() {
		short, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		s, err := m.Session(short)
		if err == nil {
			err = s.Close(ctx)
		}
		opened <- err
	}()
	eventually(t, 10*time.Second, func() bool { return advisory.ConnWaitsForTest(m) == 1 },
		"the Session waiting for the connection")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, <-opened, "the Session, given the emptied shared session's connection")
	assert.Zero(t, advisory.RestingForTest(m), "no shared session rests")
	requireNoAcquired(t, m)
}

// TestRestingSessionsCloseEndsWithTheCtx: a call that takes a resting shared session's
// connection waits for that session's close, but no longer than its ctx: with the
// session's backend stopped (SIGSTOP), the close hangs (up to its 5 s bound), and a
// Session with a 200 ms ctx returns its ctx's error at once; once the backend runs again
// the close ends and the connection serves the next call.
func TestRestingSessionsCloseEndsWithTheCtx(t *testing.T) {
	t.Parallel()
	dsn(t) // skips without a server (fails under CI=true)
	if srv.Kind() != "local" || os.Geteuid() != 0 {
		t.Skip("needs the harness's local server and root, to stop a backend with SIGSTOP")
	}
	ctx := ctxT(t)
	m, l := lockOnTheOnlyConnection(t, ctx)
	backend := l.PID()
	require.NoError(t, l.Unlock(ctx))
	require.EqualValues(t, 1, m.Stat().AcquiredConns(), "the emptied shared session rests")

	require.NoError(t, syscall.Kill(int(backend), syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(int(backend), syscall.SIGCONT) })
	short, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := m.Session(short)
	took := time.Since(began)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, took, 2*time.Second, "a Session with a 200 ms ctx, the resting session's backend stopped")
	t.Logf("the Session returned after %v: %v", took, err)

	require.NoError(t, syscall.Kill(int(backend), syscall.SIGCONT))
	s, err := m.Session(ctx)
	require.NoError(t, err, "the connection, once the resting session's close ended")
	require.NoError(t, s.Close(ctx))
}
