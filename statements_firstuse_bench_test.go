package advisory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// BenchmarkCycleManyNames is the long-running service's cycle: one connection (a pool of
// one) locks names drawn uniformly from 1,000, more than pgx's statement cache holds
// (512), after a warm-up in which every name was locked several times. It is timed
// interleaved with the raw floor (a plain pgx.Conn locking the same keys with one
// statement text, $1) and reports x-lock, the ratio. A named statement that is prepared
// and then evicted costs a prepare again: two round trips where the floor takes one.
func BenchmarkCycleManyNames(b *testing.B) {
	const names = 1000
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn(b))
	require.NoError(b, err)
	defer conn.Close(ctx)
	m := newManager(b, []string{"pool_max_conns=1"})
	name := func(i int) string { return fmt.Sprintf("%s/%d", b.Name(), i) }
	raw := func(i int) {
		var ok bool
		key := int64(advisory.KeyOf(name(i) + "/raw"))
		if err := conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", key).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
		if err := conn.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", key).Scan(&ok); err != nil || !ok {
			b.Fatal(ok, err)
		}
	}
	lib := func(i int) { cycle(b, m, (*advisory.Manager).Lock, ctx, name(i)) }
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; i < 5*names; i++ { // every name locked about five times: the steady state
		k := rng.IntN(names)
		raw(k)
		lib(k)
	}
	var tookRaw, tookLib time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		k := rng.IntN(names)
		start := time.Now()
		raw(k)
		mid := time.Now()
		lib(k)
		tookRaw, tookLib = tookRaw+mid.Sub(start), tookLib+time.Since(mid)
	}
	b.ReportMetric(float64(tookRaw.Nanoseconds())/float64(b.N), "raw-ns/cycle")
	b.ReportMetric(float64(tookLib.Nanoseconds())/float64(b.N), "lock-ns/cycle")
	b.ReportMetric(float64(tookLib)/float64(tookRaw), "x-lock")
}
