package advisory_test

import (
	"context"
	"runtime"
	"testing"
	"time"
)

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
