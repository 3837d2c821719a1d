package faults_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
)

// sample is one Token call of TestTokensSurviveSynchronousFailover: who made it, in
// which epoch (the primary's timeline minus one: epoch r is round r's primary, r+1 the
// one promoted at its end), and what it returned.
type sample struct {
	who   string // "w0".."w2": a worker; "short": the 300 ms call; "next": the first holder after a failover
	epoch int
	tok   int64
	err   error
	start time.Time
	took  time.Duration
}

// book records every Token call of the test. It is safe for concurrent use.
type book struct {
	mu      sync.Mutex
	samples []sample
	paused  atomic.Bool // the workers take no token
}

// pause stops (true) or resumes the workers' Token calls; they go on locking.
func (b *book) pause(on bool) { b.paused.Store(on) }

func (b *book) add(s sample) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.samples = append(b.samples, s)
}

func (b *book) all() []sample {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.samples)
}

// work is a holder process's loop: lock, learn the epoch, take a token (500 ms ctx), unlock,
// until ctx ends. Errors while there is no primary are expected: it tries again.
func (b *book) work(ctx context.Context, m *advisory.Manager, name, who string) {
	for ctx.Err() == nil {
		l, err := lockIn(ctx, m, name, -1)
		if err != nil {
			time.Sleep(25 * time.Millisecond)
			continue
		}
		if e, err := epochOf(ctx, l); err == nil && !b.paused.Load() {
			tctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
			start := time.Now()
			tok, err := l.Token(tctx)
			cancel()
			b.add(sample{who: who, epoch: e, tok: tok, err: err, start: start, took: time.Since(start)})
		}
		uctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		l.Unlock(uctx)
		cancel()
	}
}

// awaitToken waits (30 s at most) until a worker has taken a token in epoch e.
func (b *book) awaitToken(ctx context.Context, e int) error {
	return b.await(ctx, "worker's token", func(s sample) bool { return s.epoch == e && s.err == nil })
}

// awaitCall waits (30 s at most) until a worker's Token call in epoch e that began after
// since has ended.
func (b *book) awaitCall(ctx context.Context, e int, since time.Time) error {
	return b.await(ctx, "worker's Token call", func(s sample) bool { return s.epoch == e && s.start.After(since) })
}

func (b *book) await(ctx context.Context, what string, match func(sample) bool) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		for _, s := range b.all() {
			if strings.HasPrefix(s.who, "w") && match(s) {
				return nil
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("no %s in 30s", what)
}

// returnedWhileDown lists the tokens returned in epoch e by calls that began after since,
// when the standby was down.
func (b *book) returnedWhileDown(e int, since time.Time) []string {
	var out []string
	for _, s := range b.all() {
		if s.epoch == e && s.err == nil && s.start.After(since) {
			out = append(out, fmt.Sprintf("%s got %d", s.who, s.tok))
		}
	}
	return out
}

// staleCandidates returns the tokens returned before epoch e that a stale holder could
// write with: the newest one (the last holder before the failover), any the short call
// got, and any equal to newest, the token the new holder got (only those could pass
// CheckToken).
func (b *book) staleCandidates(e int, newest int64) []int64 {
	var out []int64
	var top int64
	for _, s := range b.all() {
		if s.err != nil || s.epoch >= e {
			continue
		}
		top = max(top, s.tok)
		if s.who == "short" || s.tok == newest {
			out = append(out, s.tok)
		}
	}
	out = append(out, top)
	slices.Sort(out)
	return slices.Compact(out)
}

// check asserts that no token was handed out twice and that every token of an epoch
// exceeds every token of the epochs before it.
func (b *book) check(t *testing.T) {
	t.Helper()
	byTok := map[int64][]sample{}
	top := map[int]sample{} // per epoch, the sample with the largest token
	low := map[int]sample{} // per epoch, the smallest
	for _, s := range b.all() {
		if s.err != nil {
			continue
		}
		byTok[s.tok] = append(byTok[s.tok], s)
		if h, ok := top[s.epoch]; !ok || s.tok > h.tok {
			top[s.epoch] = s
		}
		if l, ok := low[s.epoch]; !ok || s.tok < l.tok {
			low[s.epoch] = s
		}
	}
	for tok, ss := range byTok {
		if len(ss) > 1 {
			t.Errorf("token %d handed out %d times: %s", tok, len(ss), describeSamples(ss))
		}
	}
	for e, l := range low {
		for before, h := range top {
			if before < e && h.tok >= l.tok {
				t.Errorf("epoch %d: token %d (%s) does not exceed token %d returned in epoch %d (%s)",
					e, l.tok, l.who, h.tok, before, h.who)
			}
		}
	}
}

func describeSamples(ss []sample) string {
	var parts []string
	for _, s := range ss {
		parts = append(parts, fmt.Sprintf("%s in epoch %d", s.who, s.epoch))
	}
	return strings.Join(parts, ", ")
}

// summary describes epoch e's Token calls: tokens returned, unconfirmed, other errors.
func (b *book) summary(e int) string {
	var toks []int64
	unconfirmed := 0
	var other []string
	for _, s := range b.all() {
		switch {
		case s.epoch != e:
		case s.err == nil:
			toks = append(toks, s.tok)
		case errors.Is(s.err, advisory.ErrCommitUnconfirmed):
			unconfirmed++
		default:
			other = append(other, s.who+": "+s.err.Error())
		}
	}
	slices.Sort(toks)
	span := "none"
	if len(toks) > 0 {
		span = fmt.Sprintf("%d..%d", toks[0], toks[len(toks)-1])
	}
	return fmt.Sprintf("epoch %d: %d tokens %s, %d unconfirmed, %d other errors %q",
		e, len(toks), span, unconfirmed, len(other), other)
}

// short describes what the 300 ms Token call of round r returned.
func (b *book) short(r int) string {
	for _, s := range b.all() {
		if s.who == "short" && s.epoch == r {
			return fmt.Sprintf("token %d, %s, in %v", s.tok, errText(s.err), s.took.Round(time.Millisecond))
		}
	}
	return "not made"
}

func (b *book) logEpochs(t *testing.T) {
	t.Helper()
	for e := 0; e <= syncRounds; e++ {
		t.Log(b.summary(e))
	}
}

// lockIn takes the lock (30 s at most) and, unless want is -1, checks that it is held on
// the primary of epoch want.
func lockIn(ctx context.Context, m *advisory.Manager, name string, want int) (*advisory.Lock, error) {
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	l, err := m.Lock(lctx, name)
	if err != nil || want < 0 {
		return l, err
	}
	e, err := epochOf(ctx, l)
	if err == nil && e != want {
		err = fmt.Errorf("%s is held in epoch %d, not %d", name, e, want)
	}
	if err != nil {
		l.Unlock(ctx)
		return nil, err
	}
	return l, nil
}

// epochOf returns the epoch of the server holding l: its timeline minus one (each
// promotion starts a new timeline). A read-only transaction: its COMMIT waits for no
// standby.
func epochOf(ctx context.Context, l *advisory.Lock) (int, error) {
	var tli int
	err := l.BeginFunc(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SELECT ('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int").Scan(&tli)
	})
	return tli - 1, err
}

// execOn runs sql on a fresh connection to dsn.
func execOn(ctx context.Context, dsn, sql string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, sql)
	return err
}

// queryOn runs one query on a fresh connection to dsn and scans its row into dst.
func queryOn(ctx context.Context, dsn, sql string, dst any, args ...any) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql, args...).Scan(dst)
}

// laps times the phases of a round.
type laps struct {
	start, last time.Time
	parts       []string
}

func newLaps() *laps { now := time.Now(); return &laps{start: now, last: now} }

func (l *laps) mark(phase string) {
	now := time.Now()
	l.parts = append(l.parts, fmt.Sprintf("%s %v", phase, now.Sub(l.last).Round(time.Millisecond)))
	l.last = now
}

func (l *laps) String() string {
	return fmt.Sprintf("%s; total %v", strings.Join(l.parts, ", "), l.last.Sub(l.start).Round(time.Millisecond))
}
