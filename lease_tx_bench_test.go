package advisory_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// BenchmarkPooledCycleRatio is a transaction holding's cycle through a real PgBouncer in
// transaction mode, against raw pgx doing the same through the same PgBouncer in the
// fewest round trips (issue 47):
//
//	raw:  BEGIN; SELECT pg_advisory_xact_lock(k) as one simple-protocol message
//	      (pgconn.Exec), then COMMIT: two round trips, as the library's own;
//	ours: Manager.Lock (or TryLock) + Lock.Unlock, the Manager made on the pooler's DSN.
//
// One raw cycle, one Lock cycle and one TryLock cycle per iteration, rotating their
// order, each timed on a connection that just served an untimed cycle of its own. It
// reports x-lock and x-trylock, ours over raw (target <= 1.10), and raw's µs per cycle.
// It does not control CPU placement and opens its connections once: the bench module's
// -pooled (bench/pooled.go) places the processes and opens them afresh every round.
func BenchmarkPooledCycleRatio(b *testing.B) {
	m, rawCycle := pooledCycles(b)
	ctx, name := context.Background(), b.Name()
	raw, lock, try := rotateCycles(b, rawCycle, m, ctx, name)
	b.ReportMetric(float64(raw.Nanoseconds())/1e3/float64(b.N), "raw-µs")
	b.ReportMetric(float64(lock)/float64(raw), "x-lock")
	b.ReportMetric(float64(try)/float64(raw), "x-trylock")
}

// pooledCycles is a Manager on the DSN of a real PgBouncer in transaction mode (one
// connection; its Locks are transaction holdings), and raw pgx's cycle through the same
// PgBouncer in the fewest round trips: BEGIN and pg_advisory_xact_lock as one
// simple-protocol message, then COMMIT. Both are closed when b ends.
func pooledCycles(b *testing.B) (*advisory.Manager, func()) {
	pgtest.Need(b, srv, startErr)
	pb := pgtest.PgBouncerForTest(b, srv, pgtest.PoolTransaction)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, pgtest.WithPairs(pb.DSN(), "default_query_exec_mode=exec"))
	require.NoError(b, err)
	b.Cleanup(func() { conn.Close(ctx) })
	m, err := advisory.New(ctx, pgtest.WithPairs(pb.DSN(), "pool_max_conns=1"))
	require.NoError(b, err)
	b.Cleanup(m.Close)
	require.Equal(b, advisory.HoldingTransaction, m.Holding())
	rawLock := fmt.Sprintf("BEGIN; SELECT pg_catalog.pg_advisory_xact_lock(%d)", advisory.KeyOf(b.Name()+"/raw"))
	return m, func() {
		_, err := conn.PgConn().Exec(ctx, rawLock).ReadAll()
		if err == nil {
			_, err = conn.PgConn().Exec(ctx, "COMMIT").ReadAll()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
}
