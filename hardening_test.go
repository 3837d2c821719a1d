package advisory_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// Calls queued behind a long Session call are bounded by their own ctx.
func TestSessionQueuedCallsHonourCtx(t *testing.T) {
	t.Parallel()
	m, other := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	busy := t.Name() + "/busy"
	blocker, err := other.Lock(ctx, busy)
	require.NoError(t, err)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	mine := t.Name() + "/mine"
	require.NoError(t, s.Lock(ctx, mine))

	waitDone := make(chan error, 1)
	go func() { waitDone <- s.Lock(ctx, busy) }() // waits on the server, holding the Session's turn
	waitForWaiters(t, advisory.KeyOf(busy), 1)

	for name, call := range map[string]func(context.Context) error{
		"Lock":    func(c context.Context) error { return s.Lock(c, t.Name()+"/x") },
		"TryLock": func(c context.Context) error { return s.TryLock(c, t.Name()+"/x") },
		"Unlock":  func(c context.Context) error { return s.Unlock(c, mine) },
	} {
		cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		start := time.Now()
		err := call(cctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded, name)
		// The bound is generous: what matters is that it is not the blocker's release.
		assert.Less(t, time.Since(start), 5*time.Second, name)
	}
	select {
	case err := <-waitDone:
		t.Fatalf("the queued-behind Lock returned early: %v", err)
	default:
	}
	require.NoError(t, blocker.Unlock(ctx))
	require.NoError(t, <-waitDone)
	assert.Equal(t, 2, s.Held())
	assert.Equal(t, 1, heldBy(t, s.PID(), []string{mine}), "the timed-out Unlock released nothing")
	require.NoError(t, s.Close(ctx))
}

// Session.Close interrupts a Lock waiting on the server instead of waiting for it.
func TestSessionCloseInterruptsWait(t *testing.T) {
	t.Parallel()
	m, other := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	busy := t.Name() + "/busy"
	blocker, err := other.Lock(ctx, busy)
	require.NoError(t, err)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	waitDone := make(chan error, 1)
	go func() { waitDone <- s.Lock(ctx, busy) }()
	waitForWaiters(t, advisory.KeyOf(busy), 1)
	require.NoError(t, s.Close(ctx))
	require.ErrorIs(t, <-waitDone, advisory.ErrNotHeld)
	requireHeldBy(t, advisory.KeyOf(busy), blocker.PID())
	require.ErrorIs(t, s.Lock(ctx, t.Name()), advisory.ErrNotHeld)
	requireNoAcquired(t, m)
}

// Lead whose ctx ends just as the lock is granted releases it before returning. A log
// handler makes the timing exact: it cancels ctx on the "lock acquired" record, which Lock
// writes after the grant and before it returns to Lead.
func TestLeadReleasesWhenCtxEndsAtGrant(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	onGrant := slog.New(handlerFunc(func(r slog.Record) {
		if r.Message == "advisory: lock acquired" {
			cancel()
		}
	}))
	m := newManager(t, nil, advisory.WithLogger(onGrant))
	ran := false
	err := m.Lead(lctx, t.Name(), func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, ran, "fn must not start once ctx has ended")
	requireFree(t, advisory.KeyOf(t.Name()))
	requireNoAcquired(t, m)
}

// handlerFunc is a slog.Handler that passes every record to a function.
type handlerFunc func(slog.Record)

func (h handlerFunc) Enabled(context.Context, slog.Level) bool      { return true }
func (h handlerFunc) Handle(_ context.Context, r slog.Record) error { h(r); return nil }
func (h handlerFunc) WithAttrs([]slog.Attr) slog.Handler            { return h }
func (h handlerFunc) WithGroup(string) slog.Handler                 { return h }

// A pooled idle connection whose backend was terminated while it sat in the pool is not
// handed to the next Lock: that Lock used to meet the FATAL waiting in the socket and
// fail with a bare 57P01 (found by TestModel).
func TestPooledConnectionTerminatedWhileIdleIsReplaced(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"pool_max_conns=1"})
	ctx := ctxT(t)
	for i := 0; i < 5; i++ {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		pid := l.PID()
		require.NoError(t, l.Unlock(ctx)) // the connection goes back to the pool, idle
		terminate(t, pid)
		eventually(t, 10*time.Second, func() bool { return !backendListed(t, pid) }, "backend %d gone", pid)
		for _, try := range []func(context.Context, string) (*advisory.Lock, error){m.Lock, m.TryLock} {
			l, err = try(ctx, t.Name())
			require.NoError(t, err, "round %d: the next call gets a live connection", i)
			require.NotEqual(t, pid, l.PID())
			require.NoError(t, l.Unlock(ctx))
		}
	}
}

func backendListed(t testing.TB, pid uint32) bool {
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n))
	return n > 0
}
