package advisory_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// recorder is a slog.Handler that keeps records in memory.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// find returns the attributes (flattened, groups as "group.key") of the first record
// with msg, or nil.
func (r *recorder) find(msg string) map[string]any {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.records {
		if rec.Message != msg {
			continue
		}
		out := map[string]any{"level": rec.Level}
		rec.Attrs(func(a slog.Attr) bool {
			if a.Value.Kind() == slog.KindGroup {
				for _, g := range a.Value.Group() {
					out[a.Key+"."+g.Key] = g.Value.Any()
				}
				return true
			}
			out[a.Key] = a.Value.Any()
			return true
		})
		return out
	}
	return nil
}

func TestLoggerReportsAcquireWaitReleaseAndLoss(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	m := newManager(t, nil, advisory.WithLogger(slog.New(rec)))
	other := newManager(t, []string{"application_name=log-holder"})
	ctx := ctxT(t)
	name := t.Name()

	held, err := other.Lock(ctx, name)
	require.NoError(t, err)
	got := make(chan *advisory.Lock, 1)
	go func() {
		l, err := m.Lock(ctx, name)
		assert.NoError(t, err)
		got <- l
	}()
	require.Eventually(t, func() bool { return rec.find("advisory: waiting for lock") != nil }, 10*time.Second, 10*time.Millisecond)
	w := rec.find("advisory: waiting for lock")
	assert.Equal(t, slog.LevelInfo, w["level"])
	assert.Equal(t, name, w["name"])
	assert.EqualValues(t, held.PID(), w["holder.pid"])
	assert.Equal(t, "log-holder", w["holder.application_name"])
	require.NoError(t, held.Unlock(ctx))

	l := <-got
	a := rec.find("advisory: lock acquired")
	require.NotNil(t, a)
	assert.Equal(t, slog.LevelDebug, a["level"])
	assert.EqualValues(t, int64(l.Key()), a["key"])
	assert.EqualValues(t, l.PID(), a["pid"])
	require.NoError(t, l.Unlock(ctx))
	assert.NotNil(t, rec.find("advisory: lock released"))

	l, err = m.Lock(ctx, name)
	require.NoError(t, err)
	terminate(t, l.PID())
	<-l.Done()
	lost := rec.find("advisory: lock lost")
	require.NotNil(t, lost)
	assert.Equal(t, slog.LevelWarn, lost["level"])
	assert.Contains(t, lost["cause"], "57P01")
	assert.Panics(t, func() { advisory.WithLogger(nil) })
}

// TestWaitForItsOwnManagersHoldingIsWarned: a Lock without the holding in its ctx waits,
// as PostgreSQL's would; once it has waited a second for a holding of its own Manager,
// on the server or queued in the process behind a holder that may hand off, it logs a
// Warn that says how to re-enter, so that no self-deadlock is silent.
func TestWaitForItsOwnManagersHoldingIsWarned(t *testing.T) {
	t.Parallel() // two 2 s waits on Managers of their own: beside the package's other tests
	for what, opts := range map[string][]advisory.Option{
		"on the server": nil, "queued": {advisory.WithLocalHandoff(4, time.Minute)},
	} {
		t.Run(what, func(t *testing.T) {
			t.Parallel()
			rec := &recorder{}
			m := newManager(t, nil, append(opts, advisory.WithLogger(slog.New(rec)))...)
			ctx, name := ctxT(t), t.Name()
			outer, err := m.Lock(ctx, name)
			require.NoError(t, err)
			wctx, cancel := context.WithTimeout(ctx, 2*time.Second)
			defer cancel()
			_, err = m.Lock(wctx, name)
			require.ErrorIs(t, err, context.DeadlineExceeded, "without the holding in ctx, Lock waits")
			var got map[string]any
			eventually(t, 5*time.Second, func() bool {
				got = rec.find("advisory: waiting for a lock this Manager holds")
				return got != nil
			}, "a Warn record")
			require.Equal(t, slog.LevelWarn, got["level"])
			require.Contains(t, got["hint"], "LockFromContext")
			require.NoError(t, outer.Unlock(ctx))
		})
	}
}

// TestContentionBetweenGoroutinesIsNotAWarning (issue 46, item 6): three goroutines of one
// Manager (with one ctx) taking turns at a lock for 1.5 s each wait more than a second for
// each other; that is ordinary contention, recorded at Info as "waiting for lock" with
// held_by_this_manager, never as the Warn of a Lock waiting for its own goroutine's
// holding.
func TestContentionBetweenGoroutinesIsNotAWarning(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	m := newManager(t, nil, advisory.WithLogger(slog.New(rec)))
	ctx, name := ctxT(t), t.Name()
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Lock(ctx, name)
			if !assert.NoError(t, err) {
				return
			}
			time.Sleep(1500 * time.Millisecond) // the holder's work
			assert.NoError(t, l.Unlock(ctx))
		}()
	}
	wg.Wait()
	assert.Nil(t, rec.find("advisory: waiting for a lock this Manager holds"), "contention is not a self-wait")
	w := rec.find("advisory: waiting for lock")
	require.NotNil(t, w, "the waits were recorded")
	assert.Equal(t, slog.LevelInfo, w["level"])
	assert.Equal(t, true, w["held_by_this_manager"])
}

// messages returns the records' messages and attributes, for failure messages.
func (r *recorder) messages() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, rec := range r.records {
		s := rec.Level.String() + " " + rec.Message
		rec.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
		out = append(out, s)
	}
	return out
}
