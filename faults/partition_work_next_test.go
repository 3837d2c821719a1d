package faults_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory"
)

// nextHolder is holder B of the partition rounds: it waits for the lock from outside the
// namespace, drains, and runs its own work, either as Lock, Drain, work, Unlock or as
// Manager.Do, which drains before it calls fn. For Do, the Acquired hook says when the
// lock was granted and the drain's log records say what it drained.
type nextHolder struct {
	how      string
	m        *advisory.Manager
	do       bool
	noDrain  bool // the control: B's work starts as soon as it holds the lock
	acquired chan time.Time
	drained  *drainLog
}

func lockThenDrain(t *testing.T, how string, opts ...advisory.Option) *nextHolder {
	return &nextHolder{how: how, m: newManager(t, "", opts...)}
}

// lockNoDrain is the control: Lock, then the work, as before work fencing. Its takeovers
// are measured, not judged: they show the overlap the drain prevents.
func lockNoDrain(t *testing.T) *nextHolder {
	return &nextHolder{how: "Lock, no drain (control)", m: newManager(t, ""), noDrain: true}
}

func doDrains(t *testing.T, how string) *nextHolder {
	b := &nextHolder{how: how, do: true, acquired: make(chan time.Time, 1), drained: &drainLog{}}
	b.m = newManager(t, "", advisory.WithLogger(slog.New(b.drained)), advisory.WithHooks(advisory.Hooks{
		Acquired: func(advisory.LockEvent) { b.acquired <- time.Now() }}))
	return b
}

// takeOver is what B saw: when its lock was granted, what its drain did, when its fn
// began (client clock) and, from its work's first statement, the server's clock and how
// many of A's work sessions were still there.
type takeOver struct {
	grantAt, fnAt time.Time
	drain         advisory.DrainReport
	bStart        time.Time
	aLeft         int
	err           error
}

// takeOver starts B; the result arrives once B's work is done and its lock released.
func (b *nextHolder) takeOver(ctx context.Context, name, aTag string) <-chan takeOver {
	out := make(chan takeOver, 1)
	go func() {
		if b.do {
			out <- b.viaDo(ctx, name, aTag)
		} else {
			out <- b.viaLock(ctx, name, aTag)
		}
	}()
	return out
}

func (b *nextHolder) viaLock(ctx context.Context, name, aTag string) (r takeOver) {
	l, err := b.m.Lock(ctx, name)
	r.grantAt, r.err = time.Now(), err
	if err != nil {
		return r
	}
	if !b.noDrain {
		r.drain, r.err = l.Drain(ctx)
	}
	if r.err == nil {
		r.fnAt = time.Now()
		r.bStart, r.aLeft, r.err = nextHoldersWork(ctx, l, aTag)
	}
	if err := l.Unlock(ctx); r.err == nil {
		r.err = err
	}
	return r
}

func (b *nextHolder) viaDo(ctx context.Context, name, aTag string) (r takeOver) {
	r.err = b.m.Do(ctx, name, func(ctx context.Context) error {
		r.fnAt = time.Now()
		var err error
		r.bStart, r.aLeft, err = nextHoldersWork(ctx, advisory.LockFromContext(ctx), aTag)
		return err
	})
	if r.err == nil {
		r.grantAt = <-b.acquired
		r.drain = advisory.DrainReport{Sessions: b.drained.take(), Took: r.fnAt.Sub(r.grantAt)}
	}
	return r
}

// nextHoldersWork is B's work on a pool tagged for B's holding: its first statement
// counts the sessions of A's work still there and then reads the server's clock (the CTE
// is read first), so start is no earlier than the count; then it inserts B's marker.
func nextHoldersWork(ctx context.Context, l *advisory.Lock, aTag string) (start time.Time, aLeft int, err error) {
	cfg, err := pgxpool.ParseConfig(srv.DSN())
	if err != nil {
		return start, 0, err
	}
	l.WorkConfig(&cfg.ConnConfig.Config)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return start, 0, err
	}
	defer pool.Close()
	err = pool.QueryRow(ctx, `WITH left_over AS MATERIALIZED (
		  SELECT count(*) AS n FROM pg_stat_activity WHERE starts_with(application_name, $1))
		SELECT clock_timestamp(), n FROM left_over`, aTag).Scan(&start, &aLeft)
	if err == nil {
		_, err = pool.Exec(ctx, "INSERT INTO "+workMarkers+" (holder) VALUES ($1)", l.WorkAppName(""))
	}
	return start, aLeft, err
}

// drainLog is a slog.Handler that keeps the drained sessions the Manager logs.
type drainLog struct {
	mu       sync.Mutex
	sessions []advisory.DrainedSession
}

func (h *drainLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *drainLog) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *drainLog) WithGroup(string) slog.Handler            { return h }

func (h *drainLog) Handle(_ context.Context, r slog.Record) error {
	if !strings.HasPrefix(r.Message, "advisory: drained") {
		return nil
	}
	var ds advisory.DrainedSession
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "pid":
			ds.PID = uint32(a.Value.Uint64())
		case "application_name":
			ds.ApplicationName = a.Value.String()
		case "terminated":
			ds.Terminated = a.Value.Bool()
		case "after":
			ds.After = a.Value.Duration()
		}
		return true
	})
	h.mu.Lock()
	defer h.mu.Unlock()
	h.sessions = append(h.sessions, ds)
	return nil
}

// take returns the sessions logged so far and forgets them.
func (h *drainLog) take() []advisory.DrainedSession {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.sessions
	h.sessions = nil
	return out
}
