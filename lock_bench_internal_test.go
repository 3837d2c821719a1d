//go:build linux

package advisory

import (
	"context"
	"errors"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// BenchmarkCycleAblation splits the uncontended Lock+Unlock cycle into layers, measured
// interleaved in one loop, each as a ratio to the raw floor, so that the cost of each
// layer can be read off:
//
//	x-raw-on-ours:    the raw statements on our pool connection (our session settings).
//	x-pool:    the same, plus pool Acquire and Release around each cycle.
//	x-lock:    Manager.Lock + Lock.Unlock: everything. On a direct connection (the test
//	           server's, over loopback TCP) the lock statements are the raw ones.
//	x-shape:   the checked statement texts (ownership CASE, pg_backend_pid, two
//	           parameters) that a connection through a proxy runs, on one pool
//	           connection held throughout: the check's cost alone.
//	x-shape-on-plain: the checked texts on a plain pgx connection given a token.
func BenchmarkCycleAblation(b *testing.B) {
	dsn := os.Getenv(pgtest.EnvDSN)
	if dsn == "" {
		pgtest.Need(b, nil, errors.New("TestMain found no server"))
	}
	ctx := context.Background()
	raw, err := pgx.Connect(ctx, dsn)
	require.NoError(b, err)
	defer raw.Close(ctx)
	m, err := New(ctx, dsn+" pool_max_conns=2")
	require.NoError(b, err)
	defer m.Close()
	held, err := m.pool.Acquire(ctx)
	require.NoError(b, err)
	defer held.Release()
	name := b.Name()
	// The checked statements, which every connection that may not go straight to its
	// backend runs (a Manager's direct connections run the raw statements' shape).
	st := statementsFor(name, false, false, false)
	key := int64(KeyOf(name))
	shape := func(c interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}, token string) {
		var pid uint32
		var ok *bool
		if err := c.QueryRow(ctx, st.lock, key, token).Scan(&pid, &ok); err != nil || ok == nil || !*ok {
			b.Fatal(ok, err)
		}
		if err := c.QueryRow(ctx, st.unlock, key, token).Scan(&pid, &ok); err != nil || ok == nil || !*ok {
			b.Fatal(ok, err)
		}
	}
	_, heldToken := ownership(held.Conn().PgConn())
	// A plain connection that carries a token, for our statements without our settings.
	plain, err := pgx.Connect(ctx, dsn)
	require.NoError(b, err)
	defer plain.Close(ctx)
	_, err = plain.Exec(ctx, "SELECT set_config('"+ownerSetting+"', 'bench', false)")
	require.NoError(b, err)
	rawStatements := func(c interface {
		QueryRow(context.Context, string, ...any) pgx.Row
	}) {
		var ok bool
		if err := c.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key+1).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := c.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key+1).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	rows := []func(){
		func() { rawStatements(raw) },
		func() { shape(held, heldToken) },
		func() {
			pc, err := m.pool.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			rawStatements(pc)
			pc.Release()
		},
		func() {
			l, err := m.Lock(ctx, name)
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Unlock(ctx); err != nil {
				b.Fatal(err)
			}
		},
		func() { rawStatements(held) },
		func() { shape(plain, "bench") },
	}
	// ADVISORY_BENCH_LAYER=raw|shape|pool|lock runs one layer alone (for perf stat or
	// strace -c) and reports the process's CPU time per cycle (user + system, all threads).
	if only := os.Getenv("ADVISORY_BENCH_LAYER"); only != "" {
		n := map[string]int{"raw": 0, "shape": 1, "pool": 2, "lock": 3, "raw-on-ours": 4, "shape-on-plain": 5}[only]
		cpu0 := cpuTime()
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			rows[n]()
		}
		b.ReportMetric(float64((cpuTime()-cpu0).Microseconds())/float64(b.N), "cpu-µs/cycle")
		return
	}
	took := make([]time.Duration, len(rows))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range rows {
			k := (i + j) % len(rows)
			rows[k]() // untimed: each layer is timed on a connection that just served it
			start := time.Now()
			rows[k]()
			took[k] += time.Since(start)
		}
	}
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "raw-ns/cycle")
	for i, unit := range []string{"x-shape", "x-pool", "x-lock", "x-raw-on-ours", "x-shape-on-plain"} {
		b.ReportMetric(float64(took[i+1])/float64(took[0]), unit)
	}
}

func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPoolAcquireRelease is the pool's part of a cycle alone: Acquire (with the
// ShouldPing peek at the idle connection's socket) and Release, no statement.
func BenchmarkPoolAcquireRelease(b *testing.B) {
	dsn := os.Getenv(pgtest.EnvDSN)
	if dsn == "" {
		pgtest.Need(b, nil, errors.New("TestMain found no server"))
	}
	ctx := context.Background()
	m, err := New(ctx, dsn+" pool_max_conns=1")
	require.NoError(b, err)
	defer m.Close()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pc, err := m.pool.Acquire(ctx)
		if err != nil {
			b.Fatal(err)
		}
		pc.Release()
	}
}
