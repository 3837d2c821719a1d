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
)

// WithWaitSessions: a Manager sharing sessions waits on at most n sessions of its own;
// its other Locks whose keys are taken wait without a session. Who waits, and who holds,
// is read from pg_locks.

// lockResult is a Lock call's outcome, sent when it returns.
type lockResult struct {
	l   *advisory.Lock
	err error
	at  time.Time // when Lock returned
}

// lockCall runs m.Lock(ctx, name) on a goroutine of its own.
func lockCall(ctx context.Context, m *advisory.Manager, name string) <-chan lockResult {
	ch := make(chan lockResult, 1)
	go func() {
		l, err := m.Lock(ctx, name)
		ch <- lockResult{l, err, time.Now()}
	}()
	return ch
}

// waiters counts the backends waiting (granted = false) for any of keys.
func waiters(t testing.TB, keys ...advisory.Key) int {
	t.Helper()
	n := 0
	for _, k := range keys {
		for _, r := range lockRows(t, k) {
			if !r.Granted {
				n++
			}
		}
	}
	return n
}

// received returns the result on ch within limit; it fails the test if none came.
func received(t testing.TB, ch <-chan lockResult, limit time.Duration, what string) lockResult {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(limit):
		t.Fatalf("%s: no result within %v", what, limit)
		return lockResult{}
	}
}

// requirePending fails the test if ch has a result now.
func requirePending(t testing.TB, ch <-chan lockResult, what string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("%s returned: %v, %v", what, r.l, r.err)
	default:
	}
}

func TestWaitSessionsBoundTheWaitingConnections(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	holder := newManager(t, nil)
	m := newManager(t, nil, advisory.WithSharedSessions(100), advisory.WithWaitSessions(2))
	const n = 6
	names := make([]string, n)
	keys := make([]advisory.Key, n)
	held := make([]*advisory.Lock, n)
	for i := range n {
		names[i] = fmt.Sprintf("%s/%d", t.Name(), i)
		keys[i] = advisory.KeyOf(names[i])
		var err error
		held[i], err = holder.Lock(ctx, names[i])
		require.NoError(t, err)
	}
	calls := make([]<-chan lockResult, n)
	for i := range n {
		calls[i] = lockCall(ctx, m, names[i])
	}
	eventually(t, 10*time.Second, func() bool { return waiters(t, keys...) == 2 }, "two Locks waiting on the server")
	// The four others wait without a session however long they wait: never more than
	// two waiters, and no connection but the two waits' and a shared session's.
	for range 20 {
		time.Sleep(25 * time.Millisecond)
		require.Equal(t, 2, waiters(t, keys...), "backends waiting for the keys")
		require.LessOrEqual(t, m.Stat().AcquiredConns(), int32(3), "connections out of the pool")
	}
	for i := range n {
		requirePending(t, calls[i], names[i])
	}

	// Each release goes to m's Lock of the key, waiting on a session or not.
	for i := range n {
		require.NoError(t, held[i].Unlock(ctx))
		r := received(t, calls[i], 10*time.Second, names[i])
		require.NoError(t, r.err, names[i])
		requireHeldBy(t, keys[i], r.l.PID())
		held[i] = r.l
	}
	for i := range n {
		require.NoError(t, held[i].Unlock(ctx))
		requireFree(t, keys[i])
	}
	requireNoAcquired(t, m)
}

// TestParkedLockNeverGoesBeforeAQueuedWaiter: a Lock waiting without a session is not
// given a key that a session of another process waits for in the server's queue.
func TestParkedLockNeverGoesBeforeAQueuedWaiter(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	holder := newManager(t, nil)
	other := newManager(t, nil)
	m := newManager(t, nil, advisory.WithSharedSessions(100), advisory.WithWaitSessions(1))
	name := t.Name()
	busy, contended := name+"/busy", name+"/contended"
	busyLock, err := holder.Lock(ctx, busy)
	require.NoError(t, err)
	first, err := holder.Lock(ctx, contended)
	require.NoError(t, err)

	busyCall := lockCall(ctx, m, busy) // m's one place to wait
	waitForWaiters(t, advisory.KeyOf(busy), 1)
	parked := lockCall(ctx, m, contended)
	time.Sleep(50 * time.Millisecond)
	require.Zero(t, waiters(t, advisory.KeyOf(contended)), "m's second Lock waits without a session")
	queued := lockCall(ctx, other, contended)
	waitForWaiters(t, advisory.KeyOf(contended), 1)

	require.NoError(t, first.Unlock(ctx))
	q := received(t, queued, 10*time.Second, "the queued waiter")
	require.NoError(t, q.err)
	requireHeldBy(t, advisory.KeyOf(contended), q.l.PID())
	time.Sleep(300 * time.Millisecond) // several of the parked Lock's tries (a pause is a quarter of its wait)
	requirePending(t, parked, "the parked Lock, while the queued waiter holds the key")

	require.NoError(t, q.l.Unlock(ctx))
	p := received(t, parked, 5*time.Second, "the parked Lock")
	require.NoError(t, p.err)
	requireHeldBy(t, advisory.KeyOf(contended), p.l.PID())
	assert.True(t, p.l.SharesSession(), "taken by a try on a shared session")

	require.NoError(t, busyLock.Unlock(ctx))
	b := received(t, busyCall, 10*time.Second, "the Lock waiting on its session")
	require.NoError(t, b.err)
	require.NoError(t, b.l.Unlock(ctx))
	require.NoError(t, p.l.Unlock(ctx))
	requireNoAcquired(t, m)
}

// TestParkedLockEndsWithItsCtx: a parked Lock ends with its ctx or the Manager's Close,
// holding and waiting for nothing; a place that frees goes to a parked Lock.
func TestParkedLockEndsWithItsCtx(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	holder := newManager(t, nil)
	m := newManager(t, nil, advisory.WithSharedSessions(100), advisory.WithWaitSessions(1))
	name := t.Name()
	a, b := name+"/a", name+"/b"
	for _, n := range []string{a, b} {
		_, err := holder.Lock(ctx, n)
		require.NoError(t, err)
	}
	waitCtx, cancelWait := context.WithCancel(ctx)
	waitA := lockCall(waitCtx, m, a)
	waitForWaiters(t, advisory.KeyOf(a), 1)

	// A deadline while parked.
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err := m.Lock(short, b)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Less(t, time.Since(began), 2*time.Second)
	require.Zero(t, waiters(t, advisory.KeyOf(b)))
	// The shared session of its tries goes back to the pool in the background.
	eventually(t, 5*time.Second, func() bool { return m.Stat().AcquiredConns() == 1 }, "only the wait for a out of the pool")

	// The place freed by a's cancelled wait goes to the parked Lock of b.
	parkedB := lockCall(ctx, m, b)
	time.Sleep(50 * time.Millisecond)
	require.Zero(t, waiters(t, advisory.KeyOf(b)))
	cancelWait()
	r := received(t, waitA, 10*time.Second, "the cancelled wait")
	require.ErrorIs(t, r.err, context.Canceled)
	waitForWaiters(t, advisory.KeyOf(b), 1)
	require.Zero(t, waiters(t, advisory.KeyOf(a)))

	// Close ends a parked Lock and the wait.
	parkedA := lockCall(ctx, m, a)
	time.Sleep(50 * time.Millisecond)
	m.Close()
	for _, ch := range []<-chan lockResult{parkedA, parkedB} {
		r := received(t, ch, 10*time.Second, "a Lock at Close")
		require.True(t, errors.Is(r.err, advisory.ErrClosed), "got %v", r.err)
	}
	eventually(t, 5*time.Second, func() bool { return waiters(t, advisory.KeyOf(a), advisory.KeyOf(b)) == 0 },
		"no waiter left")
}

func TestWaitSessionsOption(t *testing.T) {
	t.Parallel()
	for _, opts := range [][]advisory.Option{
		{advisory.WithSharedSessions(10), advisory.WithWaitSessions(0)},
		{advisory.WithWaitSessions(2)},
	} {
		_, err := advisory.New(ctxT(t), dsn(t), opts...)
		require.ErrorIs(t, err, advisory.ErrInvalidOption)
	}
}

// TestWaitPlaceMovesWithAHandoff: a Lock that waited on a place and then hands its session
// to the next Lock of the key in the process (WithLocalHandoff) hands the place on too:
// another Lock still finds none until the session goes back to the pool.
func TestWaitPlaceMovesWithAHandoff(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	holder := newManager(t, nil)
	m := newManager(t, nil, advisory.WithSharedSessions(100), advisory.WithWaitSessions(1),
		advisory.WithLocalHandoff(16, time.Second))
	name := t.Name()
	k, other := name+"/k", name+"/other"
	held, err := holder.Lock(ctx, k)
	require.NoError(t, err)
	heldOther, err := holder.Lock(ctx, other)
	require.NoError(t, err)

	first := lockCall(ctx, m, k)
	waitForWaiters(t, advisory.KeyOf(k), 1)
	second := lockCall(ctx, m, k) // queued behind first in the process
	eventually(t, 5*time.Second, func() bool { return advisory.QueuedForTest(m, advisory.KeyOf(k)) == 1 },
		"second queued behind first in the process")
	require.NoError(t, held.Unlock(ctx))
	f := received(t, first, 10*time.Second, "first")
	require.NoError(t, f.err)
	require.NoError(t, f.l.Unlock(ctx)) // handed to second, with the session
	s := received(t, second, 10*time.Second, "second")
	require.NoError(t, s.err)
	require.Equal(t, f.l.PID(), s.l.PID(), "handed off on the same session")

	// The place is second's now: a Lock of another taken key parks.
	third := lockCall(ctx, m, other)
	time.Sleep(100 * time.Millisecond)
	require.Zero(t, waiters(t, advisory.KeyOf(other)), "a Lock waiting on a session while the place is held")
	require.NoError(t, s.l.Unlock(ctx))
	waitForWaiters(t, advisory.KeyOf(other), 1) // the place freed with the session
	require.NoError(t, heldOther.Unlock(ctx))
	r := received(t, third, 10*time.Second, "third")
	require.NoError(t, r.err)
	require.NoError(t, r.l.Unlock(ctx))
	requireNoAcquired(t, m)
}
