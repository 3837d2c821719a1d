package advisory_test

import (
	"context"
	"os"
	"runtime"
	"runtime/metrics"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// BenchmarkCycleCounts counts what a cycle costs the client beside what it takes
// (issue 47): per cycle, the client process's voluntary and involuntary context
// switches, goroutines started, heap allocations and CPU time, for raw pgx and the
// library on the same kind of connection, in blocks of 200 cycles that alternate row by
// row. direct: raw pgx's pg_try_advisory_lock + pg_advisory_unlock on a plain connection
// against Manager.Lock + Unlock; shared: the same raw cycle against a Lock + Unlock
// under WithSharedSessions, one call at a time (each of the shared session's batches
// carries one request); pooled: through a real PgBouncer in transaction mode,
// raw's two round trips (BEGIN; the lock, then COMMIT) against a transaction holding's
// Lock + Unlock. ADVISORY_COUNT_ROW=raw|lock runs one row alone, for strace -c -f -p.
func BenchmarkCycleCounts(b *testing.B) {
	b.Run("direct", func(b *testing.B) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn(b))
		require.NoError(b, err)
		defer conn.Close(ctx)
		m := newManager(b, []string{"pool_max_conns=1"})
		key := int64(advisory.KeyOf(b.Name() + "/raw"))
		raw := func() {
			var ok bool
			if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
			if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil || !ok {
				b.Fatal(ok, err)
			}
		}
		countRows(b, raw, func() { cycle(b, m, (*advisory.Manager).Lock, ctx, b.Name()) })
	})
	b.Run("shared", func(b *testing.B) {
		ctx := context.Background()
		conn, err := pgx.Connect(ctx, dsn(b))
		require.NoError(b, err)
		defer conn.Close(ctx)
		m := newManager(b, []string{"pool_max_conns=2"}, advisory.WithSharedSessions(64))
		countRows(b, rawCycle(b, conn, b.Name()+"/raw"), func() { cycle(b, m, (*advisory.Manager).Lock, ctx, b.Name()) })
	})
	b.Run("pooled", func(b *testing.B) {
		m, raw := pooledCycles(b)
		ctx := context.Background()
		countRows(b, raw, func() { cycle(b, m, (*advisory.Manager).Lock, ctx, b.Name()) })
	})
}

// cycleCount is what countRows adds up for a row.
type cycleCount struct{ n, vcsw, ivcsw, gor, allocs, cpu float64 }

func countRows(b *testing.B, raw, lock func()) {
	rows := []func(){raw, lock}
	if only := os.Getenv("ADVISORY_COUNT_ROW"); only != "" {
		row := rows[map[string]int{"raw": 0, "lock": 1}[only]]
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			row()
		}
		return
	}
	const block = 200
	var sum [2]cycleCount
	b.ResetTimer()
	for done := 0; done < b.N; done += block {
		for k, row := range rows {
			for i := 0; i < 20; i++ {
				row() // warm: the connection just served this row
			}
			v0, iv0, g0, a0, c0 := clientCounters()
			for i := 0; i < block; i++ {
				row()
			}
			v1, iv1, g1, a1, c1 := clientCounters()
			s := &sum[k]
			s.n += block
			s.vcsw, s.ivcsw, s.gor, s.allocs, s.cpu = s.vcsw+v1-v0, s.ivcsw+iv1-iv0, s.gor+g1-g0, s.allocs+a1-a0, s.cpu+c1-c0
		}
	}
	for k, name := range []string{"raw", "lib"} {
		s := sum[k]
		b.ReportMetric(s.vcsw/s.n, name+"-vcsw")
		b.ReportMetric(s.ivcsw/s.n, name+"-ivcsw")
		b.ReportMetric(s.gor/s.n, name+"-goroutines")
		b.ReportMetric(s.allocs/s.n, name+"-allocs")
		b.ReportMetric(s.cpu/s.n, name+"-cpu-µs")
	}
}

func clientCounters() (vcsw, ivcsw, gor, allocs, cpuMicros float64) {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return float64(ru.Nvcsw), float64(ru.Nivcsw), float64(s[0].Value.Uint64()), float64(ms.Mallocs),
		float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e3
}
