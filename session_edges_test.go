package advisory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/checkctx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

// TestHardeningSessionCloseRacesManagerClose: Session.Close and the Manager's Close at
// once. Run with -race: Session.Close wrote the session's retire flag while the
// Manager's Close read it in release (found by TestModel under -race).
func TestHardeningSessionCloseRacesManagerClose(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	for range 20 {
		m := newManager(t, nil)
		s, err := m.Session(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var wg sync.WaitGroup
		wg.Add(2)
		go func() { defer wg.Done(); s.Close(context.Background()) }()
		go func() { defer wg.Done(); m.Close() }()
		wg.Wait()
	}
}

// TestSessionCloseDuringAWaitWhoseCtxEnds: Close interrupts a Session's Lock wait while
// the call's ctx ends at its n-th check, for each n in turn: the call returns ctx's error
// or ErrNotHeld (the Session was closed), never the server's answer to the interrupt
// ("canceling statement due to user request", 57014), and the Session leaves nothing held
// (found by TestModelChecked on PostgreSQL 13: the ctx ended between the two checks that
// tell a Close's interrupt from a cancelled ctx).
func TestSessionCloseDuringAWaitWhoseCtxEnds(t *testing.T) {
	t.Parallel()
	m, other := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	busy := t.Name() + "/busy"
	key := advisory.KeyOf(busy)
	blocker, err := other.Lock(ctx, busy)
	require.NoError(t, err)
	for n := 1; n <= 12; n++ {
		s, err := m.Session(ctx)
		require.NoError(t, err)
		cctx := checkctx.CancelAt(ctx, n)
		done := make(chan error, 1)
		go func() { done <- s.Lock(cctx, busy) }()
		var got error
		returned := false
		require.True(t, within(10*time.Second, time.Millisecond, func() bool {
			select {
			case got = <-done:
				returned = true
				return true
			default:
				return len(lockRows(t, key)) == 2 // the blocker and the Session's wait
			}
		}), "n=%d: the call neither waited nor returned", n)
		require.NoError(t, s.Close(ctx))
		if !returned {
			got = <-done
		}
		require.Error(t, got, "n=%d", n)
		assert.True(t, errors.Is(got, context.Canceled) || errors.Is(got, advisory.ErrNotHeld),
			"n=%d: got %v, want ctx's error or ErrNotHeld", n, got)
		requireHeldBy(t, key, blocker.PID())
	}
	requireNoAcquired(t, m)
}
