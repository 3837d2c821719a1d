package advisory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// maxAcquired samples the Manager's acquired connections until stop is closed.
func maxAcquired(m *advisory.Manager, stop <-chan struct{}) <-chan int32 {
	out := make(chan int32, 1)
	go func() {
		var most int32
		for {
			most = max(most, m.Stat().AcquiredConns())
			select {
			case <-stop:
				out <- most
				return
			case <-time.After(200 * time.Microsecond):
			}
		}
	}()
	return out
}

func TestManyGoroutinesOnOneKeyPinTwoConnections(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	stop := make(chan struct{})
	most := maxAcquired(m, stop)
	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Lock(ctx, t.Name())
			if !assert.NoError(t, err) {
				return
			}
			n := inside.Add(1)
			for old := maxInside.Load(); n > old && !maxInside.CompareAndSwap(old, n); old = maxInside.Load() {
			}
			time.Sleep(200 * time.Microsecond)
			inside.Add(-1)
			assert.NoError(t, l.Unlock(ctx))
		}()
	}
	wg.Wait()
	close(stop)
	got := <-most
	t.Logf("100 goroutines on one key: at most %d connections acquired", got)
	assert.LessOrEqual(t, got, int32(2), "the holder's and one server-side waiter's")
	assert.EqualValues(t, 1, maxInside.Load())
	requireNoAcquired(t, m)
}

func TestInProcessQueueIsFIFO(t *testing.T) {
	t.Parallel()
	m, other := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	holder, err := other.Lock(ctx, name)
	require.NoError(t, err)
	order := make(chan int, 8)
	var wg sync.WaitGroup
	for i := 0; i < 6; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Lock(ctx, name)
			require.NoError(t, err)
			order <- i
			require.NoError(t, l.Unlock(ctx))
		}()
		if i == 0 {
			waitForWaiters(t, holder.Key(), 1) // goroutine 0 waits on the server
		} else {
			time.Sleep(20 * time.Millisecond) // the others queue in the process, in order
		}
	}
	assert.Len(t, lockRows(t, holder.Key()), 1+1, "the holder, and one of the six goroutines waiting on the server")
	require.NoError(t, holder.Unlock(ctx))
	wg.Wait()
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5}, got)
}

func TestQueuedLockCancelAndClose(t *testing.T) {
	t.Parallel()
	m, err := advisory.New(ctxT(t), dsn(t))
	require.NoError(t, err)
	other := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	holder, err := other.Lock(ctx, name)
	require.NoError(t, err)
	serverWaiter := make(chan error, 1)
	go func() { _, err := m.Lock(ctx, name); serverWaiter <- err }()
	waitForWaiters(t, holder.Key(), 1)

	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = m.Lock(wctx, name) // queued in the process behind the server-side waiter
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "queued behind another Lock of this key in this process")
	assert.Less(t, time.Since(start), 5*time.Second)

	queued := make(chan error, 1)
	go func() { _, err := m.Lock(context.Background(), name); queued <- err }()
	time.Sleep(50 * time.Millisecond)
	m.Close()
	require.ErrorIs(t, <-queued, advisory.ErrClosed, "Close ends a Lock queued in the process")
	require.ErrorIs(t, <-serverWaiter, advisory.ErrClosed)
	requireHeldBy(t, holder.Key(), holder.PID())
	require.NoError(t, holder.Unlock(ctx))
}
