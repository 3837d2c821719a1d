package advisory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// hookRecorder collects the events of a Manager's hooks.
type hookRecorder struct {
	mu     sync.Mutex
	events []string
	last   map[string]advisory.LockEvent
}

func (r *hookRecorder) hooks() advisory.Hooks {
	rec := func(kind string) func(advisory.LockEvent) {
		return func(e advisory.LockEvent) {
			r.mu.Lock()
			defer r.mu.Unlock()
			r.events = append(r.events, kind+":"+e.Reason)
			if r.last == nil {
				r.last = map[string]advisory.LockEvent{}
			}
			r.last[kind] = e
		}
	}
	return advisory.Hooks{Acquired: rec("acquired"), NotAcquired: rec("not"), Ended: rec("ended")}
}

func (r *hookRecorder) take() ([]string, map[string]advisory.LockEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ev, last := r.events, r.last
	r.events, r.last = nil, nil
	return ev, last
}

// TestHooksReportEveryOutcome: acquisitions, each kind of failure, releases and losses.
func TestHooksReportEveryOutcome(t *testing.T) {
	t.Parallel()
	var r hookRecorder
	m := newManager(t, nil, advisory.WithHooks(r.hooks()))
	other := newManager(t, nil)
	ctx := ctxT(t)

	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	ev, last := r.take()
	require.Equal(t, []string{"acquired:", "ended:released"}, ev)
	require.Equal(t, t.Name(), last["acquired"].Name)
	require.False(t, last["acquired"].Try)
	require.Positive(t, last["ended"].Held)
	require.False(t, last["ended"].Lost())

	held, err := other.Lock(ctx, t.Name())
	require.NoError(t, err)
	_, err = m.TryLock(ctx, t.Name())
	require.ErrorIs(t, err, advisory.ErrLocked)
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	_, err = m.Lock(short, t.Name())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	ev, last = r.take()
	require.Equal(t, []string{"not:locked", "not:canceled"}, ev)
	require.True(t, errors.Is(last["not"].Err, context.DeadlineExceeded))
	require.GreaterOrEqual(t, last["not"].Wait, 50*time.Millisecond)
	require.NoError(t, held.Unlock(ctx))

	l, err = m.TryLock(ctx, t.Name())
	require.NoError(t, err)
	terminate(t, l.PID())
	<-l.Done()
	ev, last = r.take()
	require.Equal(t, []string{"acquired:", "ended:terminated"}, ev)
	require.True(t, last["ended"].Lost())
	require.ErrorIs(t, last["ended"].Err, advisory.ErrLockLost)

	l, err = m.Lock(ctx, t.Name())
	require.NoError(t, err)
	m.Close()
	_, err = m.Lock(ctx, t.Name())
	require.ErrorIs(t, err, advisory.ErrClosed)
	ev, _ = r.take()
	require.Equal(t, []string{"acquired:", "ended:manager_closed"}, ev)
}
