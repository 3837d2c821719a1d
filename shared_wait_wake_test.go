package advisory_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// parkedOnePlace returns a Manager with shared sessions and one WithWaitSessions place,
// that place kept by lead, a Lock holding name+"/busy" on a session of its own (unlocked
// at the test's end), so that its next Lock of a taken key parks; parked counts its
// parked Locks.
func parkedOnePlace(t *testing.T, name string) (m *advisory.Manager, parked *atomic.Int64, lead *advisory.Lock) {
	t.Helper()
	ctx := ctxT(t)
	holder := newManager(t, nil)
	parked = new(atomic.Int64)
	m = newManager(t, nil, advisory.WithSharedSessions(16), advisory.WithWaitSessions(1),
		advisory.WithParkCounterForTest(parked))
	busy := name + "/busy"
	first, err := holder.Lock(ctx, busy)
	require.NoError(t, err)
	leader := lockCall(ctx, m, busy)
	waitForWaiters(t, advisory.KeyOf(busy), 1)
	require.NoError(t, first.Unlock(ctx))
	r := received(t, leader, 10*time.Second, "the Lock keeping m's place")
	require.NoError(t, r.err)
	require.False(t, r.l.SharesSession())
	t.Cleanup(func() { r.l.Unlock(context.Background()) })
	return m, parked, r.l
}

// TestParkedLockWokenByThisManagersUnlock (issue 47): a Lock parked for a key that a
// Lock of its own Manager holds on a shared session tries again as soon as that Lock's
// Unlock has released the key, instead of at its next try (a quarter of its wait so
// far: 0.5-1.5 s after 4.5 s parked). Three such keys at once, each granted to its
// parked Lock within 300 ms of the release (before: each only at its next try, so about
// one run in 40 would pass), on a shared session, which pg_locks shows holding it.
func TestParkedLockWokenByThisManagersUnlock(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m, parked, _ := parkedOnePlace(t, t.Name())
	const n = 3
	var first [n]*advisory.Lock
	var calls [n]<-chan lockResult
	for i := range n {
		name := fmt.Sprintf("%s/%d", t.Name(), i)
		l, err := m.Lock(ctx, name)
		require.NoError(t, err)
		require.True(t, l.SharesSession(), "a free key: taken on a shared session")
		first[i] = l
		calls[i] = lockCall(ctx, m, name)
	}
	eventually(t, 10*time.Second, func() bool { return parked.Load() == n }, "the second Lock of each key parks")
	// Parked this long, a Lock tries every 0.5-1.5 s (parkLongest, varied).
	time.Sleep(4500 * time.Millisecond)
	for i := range n {
		requirePending(t, calls[i], fmt.Sprintf("the parked Lock of key %d, while the key was held,", i))
	}
	var released [n]time.Time
	for i := range n {
		require.NoError(t, first[i].Unlock(ctx))
		released[i] = time.Now()
	}
	for i := range n {
		r := received(t, calls[i], 10*time.Second, fmt.Sprintf("the parked Lock of key %d, after the release", i))
		require.NoError(t, r.err)
		after := r.at.Sub(released[i])
		t.Logf("key %d: granted %v after this Manager released it", i, after)
		require.Less(t, after, 300*time.Millisecond, "the parked Lock of key %d waited for its next try", i)
		require.True(t, r.l.SharesSession(), "taken by a try on a shared session")
		requireHeldBy(t, r.l.Key(), r.l.PID())
		require.NoError(t, r.l.Unlock(ctx))
	}
	require.EqualValues(t, n, parked.Load())
}

// TestWokenParkedLockStillYieldsToAQueuedWaiter (issue 47): the wake at a release of
// this Manager does not let a parked Lock go before a session of another process that
// waits in the server's queue for the key: the server grants it the key at the release,
// the parked Lock's try is refused, and the parked Lock gets the key after that holder's
// Unlock.
func TestWokenParkedLockStillYieldsToAQueuedWaiter(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m, parked, _ := parkedOnePlace(t, t.Name())
	other := newManager(t, nil)
	hot := t.Name() + "/hot"
	first, err := m.Lock(ctx, hot)
	require.NoError(t, err)
	require.True(t, first.SharesSession())
	call := lockCall(ctx, m, hot)
	eventually(t, 10*time.Second, func() bool { return parked.Load() == 1 }, "the second Lock parks")
	queued := lockCall(ctx, other, hot)
	waitForWaiters(t, advisory.KeyOf(hot), 1)

	require.NoError(t, first.Unlock(ctx))
	q := received(t, queued, 10*time.Second, "the waiter in the server's queue")
	require.NoError(t, q.err)
	requireHeldBy(t, advisory.KeyOf(hot), q.l.PID())
	time.Sleep(300 * time.Millisecond) // the woken try, and the next ones, while the queued waiter holds the key
	requirePending(t, call, "the parked Lock, while another process held the key,")
	require.NoError(t, q.l.Unlock(ctx))
	r := received(t, call, 10*time.Second, "the parked Lock, after the other process's Unlock")
	require.NoError(t, r.err)
	requireHeldBy(t, advisory.KeyOf(hot), r.l.PID())
	require.NoError(t, r.l.Unlock(ctx))
}

// TestOvertakenParkedLockGoesFirstForAPlace (issue 47): a parked Lock that a queue
// overtakes (another process hands its key over through the server's queue, so every
// try is refused) is given the next place freed, before a Lock parked earlier for a key
// that is merely held, and does not wait beyond the places meanwhile: for parkPatience
// after it found the queue, its Manager has no session past its place and its shared
// one. Before, it went beyond the places as soon as it found the queue, and the freed
// place went to the Lock that asked first.
func TestOvertakenParkedLockGoesFirstForAPlace(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m, parked, lead := parkedOnePlace(t, t.Name())
	holder := newManager(t, nil)
	hot, held := t.Name()+"/hot", t.Name()+"/held"
	heldLock, err := holder.Lock(ctx, held)
	require.NoError(t, err)
	defer heldLock.Unlock(ctx)
	early := lockCall(ctx, m, held) // parks first: its key is merely held
	eventually(t, 10*time.Second, func() bool { return parked.Load() == 1 }, "the first Lock parks")

	handOver(t, hot, 20*time.Millisecond)
	waitForWaiters(t, advisory.KeyOf(hot), 1)
	began := time.Now()
	late := lockCall(ctx, m, hot)
	eventually(t, 10*time.Second, func() bool { return parked.Load() == 2 }, "the second Lock parks")
	// Its first refused try past parkPatience finds the queue by 1.4 s; until 2 s it must
	// not wait beyond the places.
	time.Sleep(time.Until(began.Add(1700 * time.Millisecond)))
	require.EqualValues(t, 2, m.Stat().AcquiredConns(), "m's sessions: the place's and the shared one")
	require.Zero(t, waiters(t, advisory.KeyOf(held)))

	require.NoError(t, lead.Unlock(ctx)) // the place goes back
	r := received(t, late, 10*time.Second, "the overtaken Lock, after the place was given back")
	require.NoError(t, r.err)
	require.False(t, r.l.SharesSession(), "taken on a session of its own: the place")
	requireHeldBy(t, r.l.Key(), r.l.PID())
	requirePending(t, early, "the Lock of the merely held key")
	require.Zero(t, waiters(t, advisory.KeyOf(held)), "the Lock parked first still parks: the place went to the overtaken one")
	require.NoError(t, r.l.Unlock(ctx))
	require.NoError(t, heldLock.Unlock(ctx))
	e := <-early
	require.NoError(t, e.err)
	require.NoError(t, e.l.Unlock(ctx))
}
