package faults_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestHAProxyFrozenHolder (issue 44, item 1): through HAProxy in TCP mode without
// on-marked-down shutdown-sessions (Patroni's sample configuration), a Manager with
// default options holds a lock, and its backend is frozen (SIGSTOP). HAProxy answers the
// client's keepalives and the server's kernel answers HAProxy's, so no keepalive ever
// sees it: before, the holder was never told. Now New finds the TCP proxy (the server
// sees HAProxy's end of the connection, not the client's), beats by default, and the
// holder is told within Bounds.HeartbeatTold, which New checked to be the minimum margin
// before Bounds.ServerFreesAfter: the earliest the library lets the server, or a cluster
// manager acting on the same keepalive-scale timings, free the lock. A frozen backend
// itself never frees it (it holds until continued or killed); in a Patroni cluster the
// next holder is granted on the promoted standby once the leader key expires (ttl, 30 s
// by default), later still.
//
// The frozen tests run in parallel with each other (each waits its heartbeat bound, about
// 7 s) after the package's serial tests, none of which they could disturb.
func TestHAProxyFrozenHolder(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	t.Parallel()
	h := pgtest.HAProxyForTest(t, srv, pgtest.HAProxyOptions{})
	ctx := ctxT(t, time.Minute)
	m, err := advisory.New(ctx, h.DSN())
	require.NoError(t, err)
	t.Cleanup(m.Close)
	b := m.Bounds()
	require.True(t, b.Proxied, "HAProxy is a proxy in the path")
	require.Positive(t, b.HeartbeatTold, "a heartbeat by default behind a proxy")
	require.LessOrEqual(t, b.HeartbeatTold+5*time.Second, b.ServerFreesAfter, "the heartbeat tells before the server can free")

	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	requireHolder(t, l.Key(), l.PID())
	freeze(t, l.PID())
	frozen := time.Now()
	select {
	case <-l.Done():
	case <-time.After(b.ServerFreesAfter):
		t.Fatalf("the holder of a frozen backend was not told within %v (ServerFreesAfter)", b.ServerFreesAfter)
	}
	told := time.Since(frozen)
	require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	require.Less(t, told, b.HeartbeatTold+5*time.Second, "told within HeartbeatTold (%v) and a busy machine's slack", b.HeartbeatTold)
	t.Logf("told %v after the freeze (HeartbeatTold %v, ServerFreesAfter %v): %v",
		told.Round(time.Millisecond), b.HeartbeatTold, b.ServerFreesAfter, l.Err())
}

// TestHAProxyFrozenWaiter (issue 44, item 5): a wait is watched like a holding. Through
// HAProxy, default options, a Lock (and a Session's Lock, the Session holding another)
// waits (in slices of the heartbeat) for a lock held elsewhere, and its backend is
// frozen (SIGSTOP): the call fails within the slice's bound (heartbeat + 5 s + the 1 s cancel grace), not with ctx's error, and its
// connection is closed; once the holder lets go and the backend is continued, it is never
// granted the lock (it sees its client gone), and the key is free for the next. Before,
// the Lock stayed queued on the frozen server until its ctx ended, with WithHeartbeat too.
//
// The two cases run in parallel, each on a Manager of its own behind the same HAProxy.
func TestHAProxyFrozenWaiter(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	t.Parallel()
	h := pgtest.HAProxyForTest(t, srv, pgtest.HAProxyOptions{})
	ctx := ctxT(t, 2*time.Minute)
	frozenWaiters(t, ctx, func(t *testing.T) *advisory.Manager { return proxiedManager(t, ctx, h) })
}

// frozenWaiters runs frozenWait in parallel for a Lock and for a Session's Lock (the
// Session holding another lock, which its wait's failure frees), each on a Manager of its
// own from newM, against a holder connected straight to the server.
func frozenWaiters(t *testing.T, ctx context.Context, newM func(t *testing.T) *advisory.Manager) {
	holder, err := advisory.New(ctx, srv.DSN())
	require.NoError(t, err)
	t.Cleanup(holder.Close)
	t.Run("Lock", func(t *testing.T) {
		t.Parallel()
		m := newM(t)
		frozenWait(t, m, holder, func(name string) error {
			l, err := m.Lock(ctx, name)
			if l != nil {
				l.Unlock(ctx)
			}
			return err
		})
	})
	t.Run("Session", func(t *testing.T) { // its wait ends the Session, and the lock it held
		t.Parallel()
		m := newM(t)
		S, err := m.Session(ctx)
		require.NoError(t, err)
		require.NoError(t, S.Lock(ctx, t.Name()+"/first"))
		frozenWait(t, m, holder, func(name string) error { return S.Lock(ctx, name) })
		<-S.Done()
		require.ErrorIs(t, S.Err(), advisory.ErrLockLost)
		next, err := holder.Lock(ctx, t.Name()+"/first")
		require.NoError(t, err, "the Session's first lock is free")
		require.NoError(t, next.Unlock(ctx))
	})
}

// proxiedManager returns a Manager with default options through h, closed when t ends.
func proxiedManager(t *testing.T, ctx context.Context, h *pgtest.HAProxy) *advisory.Manager {
	t.Helper()
	m, err := advisory.New(ctx, h.DSN())
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// frozenWait: wait(name) waits through m for a lock holder holds; its backend is frozen;
// wait must fail within the slice's bound, and the backend, continued once holder let
// go, must not keep the lock.
func frozenWait(t *testing.T, m, holder *advisory.Manager, wait func(name string) error) {
	ctx := ctxT(t, time.Minute)
	held, err := holder.Lock(ctx, t.Name())
	require.NoError(t, err)
	failed := make(chan error, 1)
	go func() { failed <- wait(t.Name()) }()
	pid := waiterOf(t, held.Key())
	freeze(t, pid)
	frozen := time.Now()
	b := m.Bounds()
	select {
	case err = <-failed:
	case <-time.After(b.ServerFreesAfter):
		t.Fatalf("a wait on a frozen backend still waited %v after the freeze", b.ServerFreesAfter)
	}
	took := time.Since(frozen)
	require.Error(t, err)
	require.NoError(t, ctx.Err())
	require.NotErrorIs(t, err, context.DeadlineExceeded, "not the caller's ctx")
	require.Equal(t, 1, strings.Count(err.Error(), "advisory:"), "one prefix: %v", err)
	require.Less(t, took, b.HeartbeatTold+time.Second+5*time.Second, "within HeartbeatTold, the cancel grace and slack")
	t.Logf("the wait failed %v after the freeze (HeartbeatTold %v): %v", took.Round(time.Millisecond), b.HeartbeatTold, err)

	require.NoError(t, held.Unlock(ctx))
	require.NoError(t, syscall.Kill(int(pid), syscall.SIGCONT))
	next, err := holder.Lock(ctx, t.Name())
	require.NoError(t, err, "the continued backend, whose client is gone, was not granted the lock for good")
	requireHolder(t, next.Key(), next.PID())
	require.NoError(t, next.Unlock(ctx))
}

// waiterOf returns the pid of the one backend waiting for key, once there is one.
func waiterOf(t *testing.T, key advisory.Key) uint32 {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var pids []int32
		rows, err := admin.Query(context.Background(), `SELECT pid FROM pg_locks
			WHERE locktype = 'advisory' AND NOT granted AND classid = $1 AND objid = $2 AND objsubid = 1`,
			uint32(uint64(key)>>32), uint32(key))
		require.NoError(t, err)
		for rows.Next() {
			var pid int32
			require.NoError(t, rows.Scan(&pid))
			pids = append(pids, pid)
		}
		require.NoError(t, rows.Err())
		if len(pids) == 1 {
			return uint32(pids[0])
		}
		require.True(t, time.Now().Before(deadline), "no waiter for key %d within 20 s: %v", key, pids)
		time.Sleep(10 * time.Millisecond)
	}
}

// TestHAProxyShutdownSessions (issue 44, item 1, what held and should stay): with
// on-marked-down shutdown-sessions and a check that sees a frozen server (pgsql-check), a
// holder with WithHeartbeat(0), which New allows behind a TCP proxy, is told once HAProxy
// marks the frozen primary down (its postmaster and the holding's backend stopped) and
// closes the session: before ServerFreesAfter, with no heartbeat at all. The server is one
// of the test's own, since its postmaster is frozen.
func TestHAProxyShutdownSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the test starts a server of its own")
	}
	serversLane.join(t)
	ctx := ctxT(t, 2*time.Minute)
	own, err := pgtest.StartLocal(ctx, pgtest.Options{})
	pgtest.Need(t, own, err)
	t.Cleanup(func() { own.Close() })
	cfg, err := pgx.ParseConfig(own.DSN())
	require.NoError(t, err)
	h := pgtest.HAProxyForTest(t, own, pgtest.HAProxyOptions{ShutdownSessions: true, CheckUser: cfg.User})
	m, err := advisory.New(ctx, h.DSN(), advisory.WithHeartbeat(0))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	b := m.Bounds()
	require.True(t, b.Proxied)
	require.Zero(t, b.HeartbeatTold)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	freeze(t, parentOf(t, l.PID())) // the postmaster: the check's startups get no answer
	freeze(t, l.PID())
	frozen := time.Now()
	select {
	case <-l.Done():
	case <-time.After(b.ServerFreesAfter):
		t.Fatalf("not told within %v with shutdown-sessions:\n%s", b.ServerFreesAfter, h.Log())
	}
	require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	t.Logf("told %v after the freeze, by HAProxy's shutdown-sessions: %v", time.Since(frozen).Round(time.Millisecond), l.Err())
}

// parentOf returns the parent pid of process pid (a backend's: its postmaster).
func parentOf(t *testing.T, pid uint32) uint32 {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	require.NoError(t, err)
	for _, line := range strings.Split(string(data), "\n") {
		if v, ok := strings.CutPrefix(line, "PPid:"); ok {
			n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 32)
			require.NoError(t, err)
			return uint32(n)
		}
	}
	t.Fatalf("no PPid in /proc/%d/status", pid)
	return 0
}

// freeze stops the backend pid (SIGSTOP) and continues it when the test ends.
func freeze(t *testing.T, pid uint32) {
	t.Helper()
	require.NoError(t, syscall.Kill(int(pid), syscall.SIGSTOP), "SIGSTOP of backend %d (needs root or the postgres user)", pid)
	t.Cleanup(func() { syscall.Kill(int(pid), syscall.SIGCONT) })
}

// requireHolder asserts, on the suite's direct admin pool, that pid holds key.
func requireHolder(t *testing.T, key advisory.Key, pid uint32) {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND pid = $1
		  AND classid = $2 AND objid = $3 AND objsubid = 1`,
		int32(pid), uint32(uint64(key)>>32), uint32(key)).Scan(&n))
	require.Equal(t, 1, n, "backend %d holds key %d", pid, key)
}
