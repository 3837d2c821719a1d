package advisory

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// records is a slog.Handler that keeps the records' messages, levels and holder pids.
type records struct {
	mu     sync.Mutex
	msgs   []string
	levels []slog.Level // of each of msgs
	pids   []uint64     // the holder.pid of every record that names one
}

// said returns the levels of the records whose message contains text.
func (r *records) said(text string) []slog.Level {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []slog.Level
	for i, m := range r.msgs {
		if strings.Contains(m, text) {
			out = append(out, r.levels[i])
		}
	}
	return out
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.msgs, r.levels = append(r.msgs, rec.Message), append(r.levels, rec.Level)
	rec.Attrs(func(a slog.Attr) bool {
		if a.Key == "holder" && a.Value.Kind() == slog.KindGroup {
			for _, g := range a.Value.Group() {
				if g.Key == "pid" {
					r.pids = append(r.pids, g.Value.Uint64())
				}
			}
		}
		return true
	})
	return nil
}

// TestWaitRecordNeverNamesTheWaiter (issue 46, item 6): the "waiting for lock" record of
// a Lock whose grant came as the record's holders were read does not name the Lock's own
// session as the holder; and once the wait has ended (the Lock returned, "lock acquired"
// logged), no record of it is written at all.
func TestWaitRecordNeverNamesTheWaiter(t *testing.T) {
	ctx, dsn, _ := serverConn(t)
	rec := &records{}
	m, err := New(ctx, dsn, WithLogger(slog.New(rec)))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	p := l.s

	p.logWait(ctx, &waitLog{start: time.Now()}) // the grant came before the record's query
	rec.mu.Lock()
	assert.NotContains(t, rec.pids, uint64(p.pid), "the record names the waiting session as the holder: %v", rec.msgs)
	rec.msgs, rec.pids = nil, nil
	rec.mu.Unlock()

	p.logWait(ctx, &waitLog{start: time.Now(), ended: true}) // the Lock returned meanwhile
	rec.mu.Lock()
	assert.Empty(t, rec.msgs, "a record of a wait that has ended")
	rec.mu.Unlock()
	require.NoError(t, l.Unlock(ctx))
}
