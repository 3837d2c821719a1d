package advisory_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/leak"
)

// handoffEvents records the Manager's Acquired and Ended events.
type handoffEvents struct {
	mu              sync.Mutex
	acquired, ended []advisory.LockEvent
}

func (h *handoffEvents) hooks() advisory.Option {
	return advisory.WithHooks(advisory.Hooks{
		Acquired: func(e advisory.LockEvent) { h.mu.Lock(); h.acquired = append(h.acquired, e); h.mu.Unlock() },
		Ended:    func(e advisory.LockEvent) { h.mu.Lock(); h.ended = append(h.ended, e); h.mu.Unlock() },
	})
}

// queued waits until n Lock calls of m wait in its in-process queue for key.
func queued(t testing.TB, m *advisory.Manager, key advisory.Key, n int) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool { return advisory.QueuedForTest(m, key) == n },
		"%d Lock calls queued in the process for key %d", n, key)
}

// lockAsync runs m.Lock(ctx, name) on a new goroutine.
func lockAsync(ctx context.Context, m *advisory.Manager, name string) <-chan *advisory.Lock {
	got := make(chan *advisory.Lock, 1)
	go func() {
		l, err := m.Lock(ctx, name)
		if err != nil {
			l = nil
		}
		got <- l
	}()
	return got
}

func TestHandoffKeepsTheBackend(t *testing.T) {
	t.Parallel()
	var ev handoffEvents
	m := newManager(t, nil, advisory.WithLocalHandoff(16, time.Second), advisory.WithFenceTable("handoff_fence"), ev.hooks())
	ctx := ctxT(t)
	require.NoError(t, m.CreateFenceTable(ctx))
	name := t.Name()
	l1, err := m.Lock(ctx, name)
	require.NoError(t, err)
	tok1, err := l1.Token(ctx)
	require.NoError(t, err)
	got := lockAsync(ctx, m, name)
	queued(t, m, l1.Key(), 1)
	requireHeldBy(t, l1.Key(), l1.PID()) // the queued call does not wait on the server
	assert.Len(t, lockRows(t, l1.Key()), 1, "no waiter on the server")

	require.NoError(t, l1.Unlock(ctx))
	l2 := <-got
	require.NotNil(t, l2)
	assert.Equal(t, l1.PID(), l2.PID(), "the backend kept the lock")
	requireHeldBy(t, l2.Key(), l2.PID())
	select {
	case <-l1.Done():
	default:
		t.Fatal("the old holder's Done is open")
	}
	require.ErrorIs(t, l1.Err(), advisory.ErrNotHeld)
	require.ErrorIs(t, l1.Unlock(ctx), advisory.ErrNotHeld)
	require.NoError(t, l2.Err())
	select {
	case <-l2.Done():
		t.Fatal("the new holder's Done is closed")
	default:
	}
	tok2, err := l2.Token(ctx)
	require.NoError(t, err)
	assert.Greater(t, tok2, tok1, "the new holding's token")

	hs, err := m.Holders(ctx, name)
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.True(t, hs[0].Granted)
	assert.Equal(t, l2.PID(), hs[0].PID)

	ev.mu.Lock()
	require.Len(t, ev.acquired, 2)
	assert.False(t, ev.acquired[0].Handoff)
	assert.True(t, ev.acquired[1].Handoff, "Acquired of the new holder")
	require.Len(t, ev.ended, 1)
	assert.Equal(t, "released", ev.ended[0].Reason)
	assert.True(t, ev.ended[0].Handoff, "Ended of the old holder")
	ev.mu.Unlock()

	terminate(t, l2.PID())
	select {
	case <-l2.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the new holder was not told of the termination")
	}
	require.ErrorIs(t, l2.Err(), advisory.ErrLockLost)
	require.ErrorIs(t, l2.Unlock(ctx), advisory.ErrLockLost)
	requireNoAcquired(t, m)
	eventually(t, 5*time.Second, func() bool { return len(lockRows(t, l2.Key())) == 0 }, "the lock freed")
}

func TestHandoffOffIsTheOldOrder(t *testing.T) {
	t.Parallel()
	var ev handoffEvents
	m := newManager(t, nil, ev.hooks()) // the default: no handoff
	ctx := ctxT(t)
	l1, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	got := lockAsync(ctx, m, t.Name())
	waitForWaiters(t, l1.Key(), 1) // the queued call waits on the server, as before
	require.NoError(t, l1.Unlock(ctx))
	l2 := <-got
	require.NotNil(t, l2)
	assert.NotEqual(t, l1.PID(), l2.PID(), "a server release and a grant to the waiter's own backend")
	requireHeldBy(t, l2.Key(), l2.PID())
	require.NoError(t, l2.Unlock(ctx))
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, e := range append(ev.acquired, ev.ended...) {
		assert.False(t, e.Handoff)
	}
	requireNoAcquired(t, m)
}

// TestHandoffCancelledWhileQueued races a queued Lock's ctx against the holder's Unlock,
// many times: the call either returns a held Lock, or ctx's error with nothing held, no
// connection pinned and no goroutine left. Not parallel: it counts goroutines.
func TestHandoffCancelledWhileQueued(t *testing.T) {
	before := runtime.NumGoroutine()
	m, err := advisory.New(ctxT(t), dsn(t), advisory.WithLocalHandoff(16, time.Second))
	require.NoError(t, err)
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	var handedOK, cancelled int
	for i := 0; i < 150; i++ {
		l1, err := m.Lock(ctx, name)
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		res := make(chan error, 1)
		var l2 *advisory.Lock
		go func() {
			var err error
			l2, err = m.Lock(wctx, name)
			res <- err
		}()
		queued(t, m, key, 1)
		jitter := time.Duration(i%7) * 15 * time.Microsecond
		unlocked := make(chan error, 1)
		go func() {
			if i%2 == 0 {
				time.Sleep(jitter)
			}
			unlocked <- l1.Unlock(ctx)
		}()
		if i%2 == 1 {
			time.Sleep(jitter)
		}
		cancel()
		err = <-res
		require.NoError(t, <-unlocked)
		if err != nil {
			cancelled++
			require.ErrorIs(t, err, context.Canceled)
			requireFree(t, key) // at once: a lock handed to a cancelled call is let go first
		} else {
			handedOK++
			requireHeldBy(t, key, l2.PID())
			require.NoError(t, l2.Unlock(ctx))
			requireFree(t, key)
		}
		require.Equal(t, 0, advisory.QueuedForTest(m, key))
	}
	t.Logf("150 races: %d handed over, %d cancelled", handedOK, cancelled)
	requireNoAcquired(t, m)
	m.Close()
	leak.Goroutines(t, before)
}

func TestHandoffLossDuringARun(t *testing.T) {
	t.Parallel()
	var handoffs atomic.Int64
	m := newManager(t, nil, advisory.WithLocalHandoff(1000, time.Minute), advisory.WithHooks(advisory.Hooks{
		Acquired: func(e advisory.LockEvent) {
			if e.Handoff {
				handoffs.Add(1)
			}
		}}))
	ctx := ctxT(t)
	name := t.Name()
	var inside atomic.Int32
	var lost, holdings atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
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
				if !assert.NoError(t, err) {
					return
				}
				assert.EqualValues(t, 1, inside.Add(1), "two holders at once")
				holdings.Add(1)
				time.Sleep(100 * time.Microsecond)
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					assert.ErrorIs(t, err, advisory.ErrLockLost)
					assert.ErrorIs(t, l.Err(), advisory.ErrLockLost)
					select {
					case <-l.Done(): // closed before Unlock reported the loss
					default:
						t.Error("Done open after a loss")
					}
					lost.Add(1)
				}
			}
		}()
	}
	for kills := 0; kills < 3; kills++ {
		start := holdings.Load()
		eventually(t, 10*time.Second, func() bool { return holdings.Load() > start+20 }, "a run of holdings")
		terminateHolder(t, advisory.KeyOf(name)) // a backend in the middle of handing the lock around
	}
	eventually(t, 10*time.Second, func() bool { return lost.Load() >= 1 }, "a holder told of a loss")
	close(stop)
	wg.Wait()
	t.Logf("%d holdings (%d handed off), %d losses reported", holdings.Load(), handoffs.Load(), lost.Load())
	assert.Greater(t, handoffs.Load(), holdings.Load()/2, "most holdings were handed off")
	requireNoAcquired(t, m)
}

// terminateHolder terminates the backend that holds key now, trying again if it let go
// first.
func terminateHolder(t *testing.T, key advisory.Key) {
	t.Helper()
	eventually(t, 10*time.Second, func() bool {
		var ok bool
		err := admin.QueryRow(context.Background(), `SELECT coalesce(bool_or(pg_terminate_backend(pid)), false)
			FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
			  AND classid = $1 AND objid = $2`, uint32(uint64(key)>>32), uint32(key)).Scan(&ok)
		require.NoError(t, err)
		return ok
	}, "terminating the holder of key %d", key)
}
