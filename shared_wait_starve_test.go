package advisory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestParkedLockIsNotStarvedByAQueue (issue 46.2): a Lock parked under WithWaitSessions,
// its one place kept by a long holding, for a key that another Manager hands over
// between two goroutines (so a session always waits for it in the server's queue, and
// every try is refused), stops parking after parkPatience and waits in the server's
// queue on a session of its own: it is granted within its ctx. A Lock parked as long for
// a key that is merely held (nobody queued) stays parked, and is granted by a try.
func TestParkedLockIsNotStarvedByAQueue(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	m, parked, lead := parkedOnePlace(t, name) // m's one place: kept by lead, a Lock that waited
	holder := newManager(t, nil)
	hot, held := name+"/hot", name+"/held"
	// A Lock of a key that is merely held (nobody queued for it) stays parked.
	heldLock, err := holder.Lock(ctx, held)
	require.NoError(t, err)
	parkedSince := time.Now()
	parkedCall := lockCall(ctx, m, held)

	// Two other Managers hand hot over, each holding it until the other waits for it in
	// the server's queue: the key is never free, and a try is always refused.
	handovers := handOver(t, hot, 20*time.Millisecond)
	waitForWaiters(t, advisory.KeyOf(hot), 1) // one of the two always waits in the server's queue

	lockCtx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	began, from := time.Now(), handovers.Load()
	l, err := m.Lock(lockCtx, hot)
	waited, handed := time.Since(began), handovers.Load()-from
	t.Logf("Lock(hot): %v after %v, while the key was handed over %d times", err, waited, handed)
	require.NoError(t, err, "a parked Lock of a key handed over %d times", handed)
	require.Positive(t, parked.Load(), "the Lock parked first")
	require.Positive(t, handed, "the key changed hands while the Lock waited")
	requireHeldBy(t, l.Key(), l.PID())
	require.NoError(t, l.Unlock(ctx))

	// The Lock of the merely held key, parked past parkPatience, has not gone beyond the
	// place: nobody waits for its key on the server, and its release goes to its try.
	if d := time.Until(parkedSince.Add(1500 * time.Millisecond)); d > 0 {
		time.Sleep(d) // tries past parkPatience (1 s), each followed by the question
	}
	requirePending(t, parkedCall, "the Lock of a merely held key")
	require.Zero(t, waiters(t, advisory.KeyOf(held)), "a parked Lock of a key nobody queues for waits without a session")
	require.NoError(t, heldLock.Unlock(ctx))
	p := received(t, parkedCall, 10*time.Second, "the parked Lock of the held key")
	require.NoError(t, p.err)
	require.True(t, p.l.SharesSession(), "taken by a try on a shared session")
	require.NoError(t, p.l.Unlock(ctx))
	require.NoError(t, lead.Unlock(ctx))
}

// handOver has two goroutines, each with a Manager of its own, take name in turn until
// the test ends; it returns the count of grants. Each holds the key at least holdFor and
// until another session is seen waiting for it in pg_locks (an event, not a time: on a
// busy machine the other goroutine may take long to reach the server's queue), so the
// key passes from holder to waiter inside the server and is never free for a try. Its
// goroutines stop when the test ends, even while they wait for the key.
func handOver(t *testing.T, name string, holdFor time.Duration) *atomic.Int64 {
	ctx, cancel := context.WithCancel(context.Background())
	var handovers atomic.Int64
	var wg sync.WaitGroup
	for range 2 {
		m := newManager(t, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				l, err := m.Lock(ctx, name)
				if err != nil {
					if ctx.Err() == nil {
						t.Errorf("the other Manager's Lock: %v", err)
					}
					return
				}
				handovers.Add(1)
				time.Sleep(holdFor)
				waitForAWaiter(ctx, t, advisory.KeyOf(name))
				if err := l.Unlock(context.Background()); err != nil {
					t.Errorf("the other Manager's Unlock: %v", err)
					return
				}
			}
		}()
	}
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &handovers
}

// waitForAWaiter returns once a session waits for key (granted = false in pg_locks), or
// ctx has ended. It polls every 2 ms; unlike waiters, it may run on any goroutine.
func waitForAWaiter(ctx context.Context, t *testing.T, key advisory.Key) {
	for ctx.Err() == nil {
		rows, err := queryLockRows(ctx, key)
		if err != nil {
			if ctx.Err() == nil {
				t.Errorf("pg_locks: %v", err)
			}
			return
		}
		for _, r := range rows {
			if !r.Granted {
				return
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
}
