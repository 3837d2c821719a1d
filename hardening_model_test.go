package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/checkctx"
)

// Regression tests for the bugs TestModel found (issue 10, item 17). Each is small and
// deterministic.

// requireSessionIntact asserts that s is open and holds exactly ns (per pg_locks too).
func requireSessionIntact(t *testing.T, s *advisory.Session, ns []string, msg string) {
	t.Helper()
	require.NoError(t, s.Err(), "%s: the Session ended", msg)
	select {
	case <-s.Done():
		t.Fatalf("%s: the Session's Done closed", msg)
	default:
	}
	require.Equal(t, len(ns), s.Held(), "%s: Held", msg)
	require.Equal(t, len(ns), heldBy(t, s.PID(), ns), "%s: locks of the Session's backend in pg_locks", msg)
}

// TestHardeningSessionCallWithDoneContext: a Session call whose ctx is already done
// returns ctx's error and leaves the Session and its locks untouched (bug 1: it destroyed
// the whole Session, "lock lost ... context already done").
func TestHardeningSessionCallWithDoneContext(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	ns := names(t.Name(), 4)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { s.Close(context.Background()) })
	require.NoError(t, s.LockAll(ctx, ns[:3]))
	done, cancel := context.WithCancel(ctx)
	cancel()
	calls := []struct {
		name string
		call func() error
	}{
		{"Lock", func() error { return s.Lock(done, ns[3]) }},
		{"TryLock", func() error { return s.TryLock(done, ns[3]) }},
		{"LockAll", func() error { return s.LockAll(done, ns[2:]) }},
		{"TryLockAll", func() error { return s.TryLockAll(done, ns[2:]) }},
		{"Unlock", func() error { return s.Unlock(done, ns[0]) }},
	}
	for _, c := range calls {
		err := c.call()
		require.ErrorIs(t, err, context.Canceled, "%s with a done ctx", c.name)
		require.NotErrorIs(t, err, advisory.ErrLockLost, "%s with a done ctx", c.name)
		requireSessionIntact(t, s, ns[:3], c.name+" with a done ctx")
	}
	requireFree(t, advisory.KeyOf(ns[3]))
	require.NoError(t, s.Lock(ctx, ns[3]), "the Session still works")
	require.NoError(t, s.Close(ctx))
	requireNoAcquired(t, m)
}

// TestHardeningSessionCallsHonourCtxWhileQueued: a Session call queued behind another
// call of the same Session (here a Lock waiting 3 s for a lock held elsewhere) returns
// promptly with its ctx's error when its ctx ends, and leaves the Session intact (bug 2:
// it returned only when the call ahead of it did).
func TestHardeningSessionCallsHonourCtxWhileQueued(t *testing.T) {
	t.Parallel()
	m, other := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	ns := names(t.Name(), 3)
	busy, err := other.Lock(ctx, ns[0])
	require.NoError(t, err)
	t.Cleanup(func() { busy.Unlock(context.Background()) })
	calls := []struct {
		name string
		call func(ctx context.Context, s *advisory.Session) error
	}{
		{"Lock", func(ctx context.Context, s *advisory.Session) error { return s.Lock(ctx, ns[2]) }},
		{"TryLock", func(ctx context.Context, s *advisory.Session) error { return s.TryLock(ctx, ns[2]) }},
		{"Unlock", func(ctx context.Context, s *advisory.Session) error { return s.Unlock(ctx, ns[1]) }},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			s, err := m.Session(ctx)
			require.NoError(t, err)
			defer s.Close(context.Background())
			require.NoError(t, s.Lock(ctx, ns[1]))
			blockCtx, unblock := context.WithTimeout(ctx, 3*time.Second)
			defer unblock()
			blocked := make(chan error, 1)
			go func() { blocked <- s.Lock(blockCtx, ns[0]) }()
			waitForWaiters(t, advisory.KeyOf(ns[0]), 1)

			qctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			defer cancel()
			start := time.Now()
			err = c.call(qctx, s)
			took := time.Since(start)
			unblock()
			assert.ErrorIs(t, err, context.DeadlineExceeded, "%s queued behind a waiting Lock", c.name)
			assert.Less(t, took, time.Second, "%s with a 100ms ctx, queued behind a 3s Lock, returned after %v", c.name, took)
			berr := <-blocked
			require.ErrorIs(t, berr, blockCtx.Err(), "the Lock ahead of it")
			requireSessionIntact(t, s, ns[1:2], c.name+" queued")
		})
	}
}

// TestHardeningLeadAndDoReleaseWhenCtxEndsAtAnyCheck: whichever check of ctx the
// cancellation lands on, Lead and Do return with the lock released and no connection
// pinned (bug 3: a cancellation right after Lead's Lock succeeded returned with the
// leader lock still held, its connection pinned).
func TestHardeningLeadAndDoReleaseWhenCtxEndsAtAnyCheck(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	name := t.Name()
	runs := map[string]func(ctx context.Context, name string, fn func(context.Context) error) error{"Lead": m.Lead, "Do": m.Do}
	for _, api := range []string{"Lead", "Do"} {
		for n := 1; n <= 30; n++ {
			parent, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
			ctx := checkctx.CancelAt(parent, n)
			err := runs[api](ctx, name, func(context.Context) error { return nil })
			cancel()
			if err != nil {
				require.ErrorIs(t, err, context.Canceled, "%s, ctx cancelled at its check #%d", api, n)
			}
			requireReleased(t, m, name, "%s returned (%v), ctx cancelled at its check #%d", api, err, n)
		}
	}
}

// requireReleased asserts that, soon, nobody holds or waits for name and m pins no
// connection.
func requireReleased(t *testing.T, m *advisory.Manager, name string, format string, args ...any) {
	t.Helper()
	key := advisory.KeyOf(name)
	deadline := time.Now().Add(5 * time.Second)
	for len(lockRows(t, key)) > 0 || m.Stat().AcquiredConns() > 0 {
		if time.Now().After(deadline) {
			t.Fatalf("%s: 5s later pg_locks rows of the key: %+v, acquired connections: %d",
				fmt.Sprintf(format, args...), lockRows(t, key), m.Stat().AcquiredConns())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestHardeningDoAndLeadReleaseWhenFnPanics: when fn panics, Do and Lead let the panic
// through and release the lock on the way (bug 4: the panic, once recovered, as net/http
// does, left the lock held and its connection pinned).
func TestHardeningDoAndLeadReleaseWhenFnPanics(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	boom := errors.New("boom")
	runs := map[string]func(ctx context.Context, name string, fn func(context.Context) error) error{"Do": m.Do, "Lead": m.Lead}
	for _, api := range []string{"Do", "Lead"} {
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			runs[api](ctx, name, func(context.Context) error { panic(boom) })
		}()
		require.Equal(t, boom, recovered, "%s: fn's panic goes through", api)
		requireReleased(t, m, name, "%s after fn panicked", api)
		// The lock can be taken again, from this Manager and its in-process queue too.
		require.NoError(t, m.Do(ctx, name, func(context.Context) error { return nil }), "%s: Do after the panic", api)
	}
}
