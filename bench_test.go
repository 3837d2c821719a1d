package advisory_test

import (
	"context"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// The lock-cycle benchmarks run side by side in one `go test -bench Cycle` so their
// ratio is measured under the same machine load:
//
//	BenchmarkCycleRawFloor:  pg_try_advisory_lock + pg_advisory_unlock on one held pgx
//	                         connection, no pool, no watcher: the floor.
//	BenchmarkCycleLock:      Manager.Lock + Lock.Unlock (pool acquire, server-side wait
//	                         statement, loss watcher started and stopped, release).
//	BenchmarkCycleTryLock:   Manager.TryLock + Lock.Unlock.

func BenchmarkCycleRawFloor(b *testing.B) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn(b))
	require.NoError(b, err)
	defer conn.Close(ctx)
	key := int64(advisory.KeyOf(b.Name()))
	var ok bool
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
}

func BenchmarkCycleLock(b *testing.B) {
	benchCycle(b, (*advisory.Manager).Lock)
}

func BenchmarkCycleTryLock(b *testing.B) {
	benchCycle(b, (*advisory.Manager).TryLock)
}

func benchCycle(b *testing.B, lock func(*advisory.Manager, context.Context, string) (*advisory.Lock, error)) {
	ctx := context.Background()
	m := newManager(b, []string{"pool_max_conns=1"})
	name := b.Name()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cycle(b, m, lock, ctx, name)
	}
}

// BenchmarkCycleRatio alternates one raw-floor cycle and one Manager.Lock+Unlock cycle
// (and one TryLock+Unlock cycle) per iteration, so drift and load hit them alike, and
// reports each as a ratio to the raw floor: x-lock and x-trylock (target <= 1.10).
func BenchmarkCycleRatio(b *testing.B) {
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn(b))
	require.NoError(b, err)
	defer conn.Close(ctx)
	m := newManager(b, []string{"pool_max_conns=1"})
	rawKey, name := int64(advisory.KeyOf(b.Name()+"/raw")), b.Name()
	rawCycle := func() {
		var ok bool
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", rawKey).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", rawKey).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	cycles := []func(){
		rawCycle,
		func() { cycle(b, m, (*advisory.Manager).Lock, ctx, name) },
		func() { cycle(b, m, (*advisory.Manager).TryLock, ctx, name) },
	}
	var took [3]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Rotate the order so no cycle always follows another on a cold backend.
		for j := 0; j < len(cycles); j++ {
			k := (i + j) % len(cycles)
			start := time.Now()
			cycles[k]()
			took[k] += time.Since(start)
		}
	}
	raw, lock, try := took[0], took[1], took[2]
	b.ReportMetric(float64(raw.Nanoseconds())/float64(b.N), "raw-ns/cycle")
	b.ReportMetric(float64(lock)/float64(raw), "x-lock")
	b.ReportMetric(float64(try)/float64(raw), "x-trylock")
}

func cycle(b *testing.B, m *advisory.Manager, lock func(*advisory.Manager, context.Context, string) (*advisory.Lock, error),
	ctx context.Context, name string) {
	l, err := lock(m, ctx, name)
	if err != nil {
		b.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		b.Fatal(err)
	}
}

func BenchmarkKeyOf(b *testing.B) {
	for _, name := range []string{"migrations", "tenant/4f1c2a9e-8d53-4b7e-9a55-0e5b8c6f2d11/billing-run"} {
		b.Run(name[:min(len(name), 10)], func(b *testing.B) {
			b.SetBytes(int64(len(name)))
			for i := 0; i < b.N; i++ {
				advisory.KeyOf(name)
			}
		})
	}
}

// BenchmarkContendedOneKey: 100 goroutines of one Manager take turns on one key (b.N
// Lock+Unlock cycles in all). It reports max-conns, the most connections the pool had out
// at once (the in-process queue keeps it at 2), and ns/op per handoff.
func BenchmarkContendedOneKey(b *testing.B) {
	m := newManager(b, nil)
	ctx := context.Background()
	stop := make(chan struct{})
	most := maxAcquired(m, stop)
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for g := 0; g < 100; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				l, err := m.Lock(ctx, b.Name())
				if err == nil {
					err = l.Unlock(ctx)
				}
				if err != nil {
					b.Error(err) // not Fatal: this is not the benchmark's goroutine
					return
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	close(stop)
	b.ReportMetric(float64(<-most), "max-conns")
}

// BenchmarkSessionLockAll10000: one Session takes 10,000 locks in one call and releases
// them (Close). ns/op is per 10,000; target: LockAll <= 100 ms. The Session's connection
// is retired at each Close (it held more than the retire threshold), so every iteration
// starts on a fresh backend, as a user's would.
func BenchmarkSessionLockAll10000(b *testing.B) {
	m := newManager(b, nil)
	ctx := context.Background()
	ns := names(b.Name(), 10000)
	var locking time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		s, err := m.Session(ctx)
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		if err := s.LockAll(ctx, ns); err != nil {
			b.Fatal(err)
		}
		locking += time.Since(start)
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(locking.Milliseconds())/float64(b.N), "ms/LockAll")
}

// BenchmarkSessionMemoryPerLock reports the client heap a Session spends per held lock.
func BenchmarkSessionMemoryPerLock(b *testing.B) {
	m := newManager(b, nil)
	ctx := context.Background()
	const n = 10000
	ns := names(b.Name(), n)
	var perLock float64
	for i := 0; i < b.N; i++ {
		s, err := m.Session(ctx)
		if err != nil {
			b.Fatal(err)
		}
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		if err := s.LockAll(ctx, ns); err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		perLock = float64(int64(after.HeapAlloc)-int64(before.HeapAlloc)) / n
		runtime.KeepAlive(ns)
		if err := s.Close(ctx); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(perLock, "B/lock")
}
