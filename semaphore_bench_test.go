package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// BenchmarkSemaphoreCycle alternates, per iteration, one Manager.Lock+Unlock cycle, one
// Semaphore.Acquire+Unlock cycle and one TryAcquire+Unlock cycle (limit 4, uncontended),
// so drift and load hit them alike. It reports the Lock cycle's time and the semaphore
// cycles' as ratios to it: x-acquire and x-tryacquire. A slot's Unlock also sends the
// NOTIFY that wakes waiters of other processes, on a second pool connection, after Unlock
// returns: it is part of the cost (its round trip overlaps the next cycle).
func BenchmarkSemaphoreCycle(b *testing.B) {
	ctx := context.Background()
	m := newManager(b, []string{"pool_max_conns=2"})
	s, err := m.Semaphore(b.Name(), 4)
	require.NoError(b, err)
	name := b.Name() + "/lock"
	unlock := func(l *advisory.Lock, err error) {
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
	}
	cycles := []func(){
		func() { unlock(m.Lock(ctx, name)) },
		func() { unlock(s.Acquire(ctx)) },
		func() { unlock(s.TryAcquire(ctx)) },
	}
	var took [3]time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for j := range cycles {
			k := (i + j) % len(cycles)
			start := time.Now()
			cycles[k]()
			took[k] += time.Since(start)
		}
	}
	b.ReportMetric(float64(took[0].Nanoseconds())/float64(b.N), "lock-ns/cycle")
	b.ReportMetric(float64(took[1])/float64(took[0]), "x-acquire")
	b.ReportMetric(float64(took[2])/float64(took[0]), "x-tryacquire")
}
