package advisory_test

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// panicky returns hooks that each panic, counting their calls.
func panicky(calls *atomic.Int64) advisory.Hooks {
	boom := func(advisory.LockEvent) { calls.Add(1); panic("hook panics") }
	return advisory.Hooks{Acquired: boom, NotAcquired: boom, Ended: boom}
}

// panicHandler is a slog handler that panics on every record.
type panicHandler struct{ calls *atomic.Int64 }

func (h panicHandler) Enabled(context.Context, slog.Level) bool { return true }
func (h panicHandler) Handle(context.Context, slog.Record) error {
	h.calls.Add(1)
	panic("handler panics")
}
func (h panicHandler) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h panicHandler) WithGroup(string) slog.Handler      { return h }

// closeReturns fails the test unless m.Close returns within 10 s.
func closeReturns(t *testing.T, m *advisory.Manager) {
	t.Helper()
	done := make(chan struct{})
	go func() { m.Close(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return")
	}
}

// TestPanickingCallbacksLeaveNothingBehind: hooks and a logger handler that panic on
// every call, on every path (Lock, TryLock held elsewhere, Unlock, a loss seen by the
// watcher, a semaphore slot, a Session, Do): each call returns as it would without them,
// the lock is held or free as it should be, Done closes, no connection stays acquired,
// and Close returns.
func TestPanickingCallbacksLeaveNothingBehind(t *testing.T) {
	t.Parallel()
	var hookCalls, logCalls atomic.Int64
	m := newManager(t, nil, advisory.WithHooks(panicky(&hookCalls)),
		advisory.WithLogger(slog.New(panicHandler{&logCalls})))
	other := newManager(t, nil)
	ctx := ctxT(t)
	name, key := t.Name(), advisory.KeyOf(t.Name())

	l, err := m.Lock(ctx, name) // Acquired panics
	require.NoError(t, err)
	requireHeldBy(t, key, l.PID())
	require.NoError(t, l.Unlock(ctx)) // Ended panics
	<-l.Done()
	requireFree(t, key)
	again, err := m.Lock(ctx, name) // the in-process queue was given back
	require.NoError(t, err)

	_, err = other.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked)
	held, err := other.Lock(ctx, name+"/held")
	require.NoError(t, err)
	_, err = m.TryLock(ctx, name+"/held") // NotAcquired panics
	require.ErrorIs(t, err, advisory.ErrLocked)
	require.NoError(t, held.Unlock(ctx))

	terminate(t, again.PID()) // Ended panics on the watcher's goroutine
	<-again.Done()
	require.ErrorIs(t, again.Err(), advisory.ErrLockLost)

	sem, err := m.Semaphore(name+"/sem", 2)
	require.NoError(t, err)
	slot, err := sem.Acquire(ctx)
	require.NoError(t, err)
	require.NoError(t, slot.Unlock(ctx))

	s, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Lock(ctx, name+"/session"))
	require.NoError(t, s.Close(ctx))

	require.NoError(t, m.Do(ctx, name, func(context.Context) error { return nil }))
	requireNoAcquired(t, m)
	eventually(t, 10*time.Second, func() bool { return len(lockRows(t, key)) == 0 }, "lock free")
	assert.GreaterOrEqual(t, hookCalls.Load(), int64(8), "hook calls")
	assert.Positive(t, logCalls.Load(), "logger calls")
	closeReturns(t, m)
}

// TestPanickingHookKeepsTheQueueMoving: with an Acquired hook that panics, goroutines
// queued for one name in the Manager all get their turn.
func TestPanickingHookKeepsTheQueueMoving(t *testing.T) {
	t.Parallel()
	var calls atomic.Int64
	m := newManager(t, nil, advisory.WithHooks(advisory.Hooks{Acquired: func(advisory.LockEvent) {
		calls.Add(1)
		panic("acquired")
	}}))
	done := make(chan error, 4)
	for range 4 {
		go func() {
			done <- m.Do(ctxT(t), t.Name(), func(context.Context) error { time.Sleep(10 * time.Millisecond); return nil })
		}()
	}
	for range 4 {
		select {
		case err := <-done:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("a queued Do never got the lock")
		}
	}
	assert.Equal(t, int64(4), calls.Load())
	requireNoAcquired(t, m)
	closeReturns(t, m)
}
