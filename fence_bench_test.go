package advisory_test

import (
	"context"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// BenchmarkFenceRatio alternates, per iteration, one transaction through pgx.BeginFunc
// on a plain pgx connection (the floor: a connection pinned for a lock, used directly)
// and one through Lock.BeginFunc on a held lock, each an UPDATE of its own row, and
// reports the medians and their ratio x-beginfunc (target <= 1.10). The harness server
// runs with fsync and synchronous_commit off, so commits are cheap and the overhead shows
// at its largest.
func BenchmarkFenceRatio(b *testing.B) {
	benchFence(b, context.Background())
}

// BenchmarkFenceRatioCancellable is BenchmarkFenceRatio with a cancellable ctx for both
// sides, as real callers pass: pgx then watches the ctx of every statement.
func BenchmarkFenceRatioCancellable(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	benchFence(b, ctx)
}

func benchFence(b *testing.B, ctx context.Context) {
	table := pgx.Identifier{"bench_fence"}.Sanitize()
	_, err := admin.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+table+" (id int PRIMARY KEY, n bigint NOT NULL);"+
		"INSERT INTO "+table+" VALUES (1, 0), (2, 0) ON CONFLICT DO NOTHING")
	require.NoError(b, err)
	conn, err := pgx.Connect(ctx, dsn(b))
	require.NoError(b, err)
	defer conn.Close(ctx)
	m := newManager(b, []string{"pool_max_conns=2"})
	l, err := m.Lock(ctx, b.Name())
	require.NoError(b, err)
	defer l.Unlock(ctx)
	update := func(id int) func(pgx.Tx) error {
		return func(tx pgx.Tx) error {
			_, err := tx.Exec(ctx, "UPDATE "+table+" SET n = n + 1 WHERE id = $1", id)
			return err
		}
	}
	raw, ours := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		if err := pgx.BeginFunc(ctx, conn, update(1)); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if err := l.BeginFunc(ctx, update(2)); err != nil {
			b.Fatal(err)
		}
		raw, ours = append(raw, mid.Sub(start)), append(ours, time.Since(mid))
	}
	b.StopTimer()
	r, o := median(raw), median(ours)
	b.ReportMetric(float64(r.Microseconds()), "raw-µs")
	b.ReportMetric(float64(o.Microseconds()), "beginfunc-µs")
	b.ReportMetric(float64(o)/float64(r), "x-beginfunc")
}

// BenchmarkTokenCost alternates, per iteration, a Lock+Unlock cycle and a
// Lock+Token+Unlock cycle on two keys and reports the medians: token-µs is what Token
// adds (one statement and its commit; on the harness server, with fsync off, the commit's
// flush costs nothing: on a real disk add one WAL flush, see docs/fencing.md).
func BenchmarkTokenCost(b *testing.B) {
	ctx := context.Background()
	table := "bench_fence_tokens"
	m := newManager(b, []string{"pool_max_conns=2"}, advisory.WithFenceTable(table))
	require.NoError(b, m.CreateFenceTable(ctx))
	plain, withToken := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		l, err := m.Lock(ctx, b.Name()+"/plain")
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		l, err = m.Lock(ctx, b.Name()+"/token")
		if err != nil {
			b.Fatal(err)
		}
		if _, err := l.Token(ctx); err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		plain, withToken = append(plain, mid.Sub(start)), append(withToken, time.Since(mid))
	}
	b.StopTimer()
	p, w := median(plain), median(withToken)
	b.ReportMetric(float64(p.Microseconds()), "cycle-µs")
	b.ReportMetric(float64((w - p).Microseconds()), "token-µs")
}

func median(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

// BenchmarkHooksOverhead alternates, per iteration, a Lock+Unlock cycle on a Manager
// without hooks and one on a Manager whose hooks count events (atomically), and reports
// the medians and their ratio x-hooks: what observing costs when used; unused hooks are
// a nil check.
func BenchmarkHooksOverhead(b *testing.B) {
	ctx := context.Background()
	var n atomic.Int64
	count := func(advisory.LockEvent) { n.Add(1) }
	plain := newManager(b, []string{"pool_max_conns=1"})
	hooked := newManager(b, []string{"pool_max_conns=1"},
		advisory.WithHooks(advisory.Hooks{Acquired: count, NotAcquired: count, Ended: count}))
	without, with := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		start := time.Now()
		cycle(b, plain, (*advisory.Manager).Lock, ctx, b.Name()+"/plain")
		mid := time.Now()
		cycle(b, hooked, (*advisory.Manager).Lock, ctx, b.Name()+"/hooked")
		without, with = append(without, mid.Sub(start)), append(with, time.Since(mid))
	}
	b.StopTimer()
	if n.Load() != int64(2*b.N) {
		b.Fatalf("hooks called %d times for %d cycles", n.Load(), b.N)
	}
	w, h := median(without), median(with)
	b.ReportMetric(float64(w.Microseconds()), "plain-µs")
	b.ReportMetric(float64(h)/float64(w), "x-hooks")
}

// BenchmarkCreateFenceTableCurrent is CreateFenceTable on a table that is already
// current: the common case of a pod that calls it at every start. It must stay one
// statement (a catalog read; earlier versions ran CREATE TABLE IF NOT EXISTS).
func BenchmarkCreateFenceTableCurrent(b *testing.B) {
	ctx := context.Background()
	m := newManager(b, []string{"pool_max_conns=2"}, advisory.WithFenceTable("bench_fence_create"))
	require.NoError(b, m.CreateFenceTable(ctx))
	b.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS bench_fence_create") })
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := m.CreateFenceTable(ctx); err != nil {
			b.Fatal(err)
		}
	}
}
