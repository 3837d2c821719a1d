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
// queue on a session of its own: it is granted within its ctx.
func TestParkedLockIsNotStarvedByAQueue(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	holder := newManager(t, nil)
	other := newManager(t, nil)
	var parked atomic.Int64
	m := newManager(t, nil, advisory.WithSharedSessions(16), advisory.WithWaitSessions(1),
		advisory.WithParkCounterForTest(&parked))
	name := t.Name()
	busy, hot := name+"/busy", name+"/hot"

	// m's one place: a Lock that waited, and now holds busy on a session of its own.
	first, err := holder.Lock(ctx, busy)
	require.NoError(t, err)
	leader := lockCall(ctx, m, busy)
	waitForWaiters(t, advisory.KeyOf(busy), 1)
	require.NoError(t, first.Unlock(ctx))
	lead := received(t, leader, 10*time.Second, "the Lock keeping m's place")
	require.NoError(t, lead.err)
	require.False(t, lead.l.SharesSession())

	// Another Manager hands hot over between two goroutines, each holding it holdFor: when
	// one releases it, the other has waited in the server's queue for holdFor, and the
	// first queues again long before the second releases it. The key is never free, and
	// a try is always refused.
	handovers := handOver(t, other, hot, 20*time.Millisecond)
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
	require.NoError(t, lead.l.Unlock(ctx))
}

// handOver has two goroutines take name on m in turn, each holding it for holdFor, until
// the test ends; it returns the count of grants.
func handOver(t *testing.T, m *advisory.Manager, name string, holdFor time.Duration) *atomic.Int64 {
	ctx := ctxT(t)
	var handovers atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := m.Lock(ctx, name)
				if err != nil {
					t.Errorf("the other Manager's Lock: %v", err)
					return
				}
				handovers.Add(1)
				time.Sleep(holdFor) // the other goroutine is queued in the server meanwhile
				if err := l.Unlock(ctx); err != nil {
					t.Errorf("the other Manager's Unlock: %v", err)
					return
				}
			}
		}()
	}
	t.Cleanup(func() { close(stop); wg.Wait() })
	return &handovers
}
