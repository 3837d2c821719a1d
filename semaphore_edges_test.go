package advisory_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestSemaphoreOnAnExhaustedPool: when this Manager's slots pin every pool connection,
// TryAcquire says so at once and Acquire when its ctx ends; neither hangs or takes more.
func TestSemaphoreOnAnExhaustedPool(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"pool_max_conns=2"})
	ctx := ctxT(t)
	s, err := m.Semaphore(t.Name(), 4)
	require.NoError(t, err)
	a, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	b, err := s.Acquire(ctx)
	require.NoError(t, err)
	_, err = s.TryAcquire(ctx)
	require.ErrorIs(t, err, advisory.ErrPoolExhausted)
	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(cctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, advisory.ErrPoolExhausted)
	held, waiting := semaphoreRows(t, s)
	assert.ElementsMatch(t, []lockRow{{a.PID(), true}, {b.PID(), true}}, held)
	assert.Empty(t, waiting)
	requireFree(t, s.TurnstileKey())
	require.NoError(t, a.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
	requireNoAcquired(t, m)
}

// TestSemaphoreWithDoneContext: a ctx already done fails at once and takes nothing, as
// for Lock.
func TestSemaphoreWithDoneContext(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	s, err := m.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = s.Acquire(ctx)
	require.ErrorIs(t, err, context.Canceled)
	_, err = s.TryAcquire(ctx)
	require.ErrorIs(t, err, context.Canceled)
	held, waiting := semaphoreRows(t, s)
	assert.Empty(t, append(held, waiting...))
	requireFree(t, s.TurnstileKey())
	requireNoAcquired(t, m)
}

// TestSemaphoreHooks: each Acquire and TryAcquire call is one Acquired or NotAcquired
// event, each slot Lock one Ended event; the turnstile and the tries of held slots are
// not reported.
func TestSemaphoreHooks(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var events []string
	record := func(kind string) func(advisory.LockEvent) {
		return func(e advisory.LockEvent) {
			mu.Lock()
			defer mu.Unlock()
			events = append(events, fmt.Sprintf("%s %s try=%v %s", kind, strings.TrimPrefix(e.Name, t.Name()), e.Try, e.Reason))
		}
	}
	m := newManager(t, nil, advisory.WithHooks(advisory.Hooks{
		Acquired: record("acquired"), NotAcquired: record("not-acquired"), Ended: record("ended")}))
	ctx := ctxT(t)
	s, err := m.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	a, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	b, err := s.Acquire(ctx)
	require.NoError(t, err)
	_, err = s.TryAcquire(ctx)
	require.ErrorIs(t, err, advisory.ErrLocked)
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = s.Acquire(cctx) // queues on the turnstile, waits for a slot, times out
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, a.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
	slotA, slotB := strings.TrimPrefix(a.Name(), t.Name()), strings.TrimPrefix(b.Name(), t.Name())
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{
		"acquired " + slotA + " try=true ",
		"acquired " + slotB + " try=false ",
		"not-acquired  try=true locked",
		"not-acquired  try=false canceled",
		"ended " + slotA + " try=false released",
		"ended " + slotB + " try=false released",
	}, events)
}

// TestSemaphoreIsNotReentrant: Acquire and TryAcquire under a slot of the same
// semaphore fail at once with ErrNotReentrant (a second slot would count the caller
// twice; with the others taken it would wait for itself), and take nothing. A Lock of
// the slot's own name re-enters the slot, as for any lock.
func TestSemaphoreIsNotReentrant(t *testing.T) {
	forEachHolding(t, func(t *testing.T, m *advisory.Manager) {
		ctx := ctxT(t)
		sem, err := m.Semaphore(t.Name(), 2)
		require.NoError(t, err)
		slot, err := sem.Acquire(ctx)
		require.NoError(t, err)
		under := advisory.ContextWithLock(ctx, slot)
		for what, acquire := range map[string]func(context.Context) (*advisory.Lock, error){
			"Acquire": sem.Acquire, "TryAcquire": sem.TryAcquire,
		} {
			_, err := atOnce(t, under, what, acquire)
			require.ErrorIs(t, err, advisory.ErrNotReentrant, what)
			require.Len(t, libraryPrefix.FindAllString(err.Error(), -1), 1, "one prefix: %v", err)
		}
		l, err := atOnce(t, under, "Lock of the slot", func(ctx context.Context) (*advisory.Lock, error) {
			return m.LockKey(ctx, slot.Key())
		})
		require.NoError(t, err)
		require.True(t, l.Reentered())
		require.NoError(t, l.Unlock(ctx))
		hs, err := sem.Holders(ctx)
		require.NoError(t, err)
		require.Len(t, hs, 1, "one slot held")
		require.NoError(t, slot.Unlock(ctx))
		requireNoAcquired(t, m)
	})
}
