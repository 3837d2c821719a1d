package advisory_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

type leaderEvent struct {
	who   string
	start bool
	cause error
}

// leader runs Lead for who; its fn reports start and stop and waits for its ctx.
func leader(ctx context.Context, m *advisory.Manager, name, who string, events chan<- leaderEvent) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- m.Lead(ctx, name, func(ctx context.Context) error {
			events <- leaderEvent{who: who, start: true}
			<-ctx.Done()
			events <- leaderEvent{who: who, cause: context.Cause(ctx)}
			return ctx.Err()
		})
	}()
	return done
}

func nextEvent(t *testing.T, events <-chan leaderEvent) leaderEvent {
	t.Helper()
	select {
	case ev := <-events:
		return ev
	case <-time.After(10 * time.Second):
		t.Fatal("no leadership change within 10s")
	}
	return leaderEvent{}
}

// TestLeadFailsOverOnTermination: two candidates; terminating the leader's session
// cancels its function and makes the other one leader; then back again.
func TestLeadFailsOverOnTermination(t *testing.T) {
	t.Parallel()
	a, b := newManager(t, []string{"application_name=cand-a"}), newManager(t, []string{"application_name=cand-b"})
	ctx, cancel := context.WithCancel(ctxT(t))
	name := t.Name()
	events := make(chan leaderEvent, 16)
	doneA := leader(ctx, a, name, "a", events)
	first := nextEvent(t, events)
	require.True(t, first.start)
	require.Equal(t, "a", first.who)
	doneB := leader(ctx, b, name, "b", events)
	waitForWaiters(t, advisory.KeyOf(name), 1)
	select {
	case ev := <-events:
		t.Fatalf("leadership changed without a loss: %+v", ev)
	case <-time.After(100 * time.Millisecond):
	}

	current := "a"
	for round := 0; round < 3; round++ {
		waitForWaiters(t, advisory.KeyOf(name), 1) // the other candidate is back in the queue
		hs, err := a.Holders(ctx, name)
		require.NoError(t, err)
		require.True(t, hs[0].Granted)
		require.Equal(t, "cand-"+current, hs[0].ApplicationName)
		terminate(t, hs[0].PID)
		got := map[string]leaderEvent{}
		for len(got) < 2 {
			ev := nextEvent(t, events)
			got[map[bool]string{true: "start", false: "stop"}[ev.start]] = ev
		}
		assert.Equal(t, current, got["stop"].who, "the old leader's function was cancelled")
		assert.ErrorIs(t, got["stop"].cause, advisory.ErrLockLost)
		assert.NotEqual(t, current, got["start"].who, "the other candidate took over")
		current = got["start"].who
	}
	cancel()
	for _, done := range []<-chan error{doneA, doneB} {
		assert.ErrorIs(t, <-done, context.Canceled)
	}
	requireFree(t, advisory.KeyOf(name))
	requireNoAcquired(t, a)
	requireNoAcquired(t, b)
}

func TestLeadReturnsWhenTheFunctionDoes(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	boom := errors.New("boom")
	err := m.Lead(ctx, t.Name(), func(context.Context) error { return boom })
	require.ErrorIs(t, err, boom)
	require.NoError(t, m.Lead(ctx, t.Name(), func(context.Context) error { return nil }))
	requireFree(t, advisory.KeyOf(t.Name()))
	require.ErrorIs(t, m.Lead(ctx, "", func(context.Context) error { return nil }), advisory.ErrInvalidKey)
	assert.Panics(t, func() { m.Lead(ctx, "x", nil) })
}

// Lead whose ctx ends just as the lock is granted releases it before returning. A log
// handler makes the timing exact: it cancels ctx on the "lock acquired" record, which Lock
// writes after the grant and before it returns to Lead.
func TestLeadReleasesWhenCtxEndsAtGrant(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	lctx, cancel := context.WithCancel(ctx)
	defer cancel()
	onGrant := slog.New(handlerFunc(func(r slog.Record) {
		if r.Message == "advisory: lock acquired" {
			cancel()
		}
	}))
	m := newManager(t, nil, advisory.WithLogger(onGrant))
	ran := false
	err := m.Lead(lctx, t.Name(), func(context.Context) error { ran = true; return nil })
	require.ErrorIs(t, err, context.Canceled)
	assert.False(t, ran, "fn must not start once ctx has ended")
	requireFree(t, advisory.KeyOf(t.Name()))
	requireNoAcquired(t, m)
}

// handlerFunc is a slog.Handler that passes every record to a function.
type handlerFunc func(slog.Record)

func (h handlerFunc) Enabled(context.Context, slog.Level) bool { return true }

func (h handlerFunc) Handle(_ context.Context, r slog.Record) error { h(r); return nil }

func (h handlerFunc) WithAttrs([]slog.Attr) slog.Handler { return h }

func (h handlerFunc) WithGroup(string) slog.Handler { return h }
