package advisory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/pgadvisory/advisory"
)

// BenchmarkLocalHandoffRatio alternates, rotating their order, the raw cross-process
// handoff floor (a waiter blocked in pg_advisory_lock on a second pgx connection gets the
// lock when the first connection unlocks: an unlock, a grant and a wake-up) and an
// in-process handoff (Lock.Unlock with another goroutine's Manager.Lock of the name queued
// in the same Manager, WithLocalHandoff). Each is timed from the unlock call to the
// waiter's return. It reports raw-µs, local-µs and x-local, local over raw (target <=
// 0.1). It does not place the client or the server on CPUs: run it under taskset -c 0
// (the test server inherits the test binary's affinity) to measure both on one core.
func BenchmarkLocalHandoffRatio(b *testing.B) {
	ctx := context.Background()
	raw := rawHandoff(b)
	m := newManager(b, nil, advisory.WithLocalHandoff(16, time.Second))
	local := func(i int) time.Duration {
		name := fmt.Sprintf("%s/local/%d", b.Name(), i)
		l, err := m.Lock(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		got := make(chan *advisory.Lock, 1)
		at := make(chan time.Time, 1)
		go func() { l2, _ := m.Lock(ctx, name); at <- time.Now(); got <- l2 }()
		queued(b, m, l.Key(), 1)
		start := time.Now()
		if err := l.Unlock(ctx); err != nil {
			b.Fatal(err)
		}
		d := (<-at).Sub(start)
		l2 := <-got
		if l2 == nil || l2.PID() != l.PID() || l2.Unlock(ctx) != nil {
			b.Fatal("no handoff")
		}
		return d
	}
	alternate(b, raw, local, "local-µs", "x-local")
}
