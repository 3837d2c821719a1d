package advisory_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
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
