package advisory_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// BenchmarkPooledLadder climbs from raw pgx's two round trips through a real PgBouncer in
// transaction mode to a transaction holding's Lock + Unlock, one step at a time (issue 47),
// to find which step costs what:
//
//	floor      BEGIN; SELECT pg_advisory_xact_lock(k), then COMMIT, on a pgx.Conn
//	text       the library's exact text (BEGIN, its SET LOCALs, its lock SELECT), then COMMIT
//	pgxpool    the same, Acquire and Release of a plain pgxpool around each cycle
//	libconn    the same on one connection of a Manager's pool, kept (the library's dialer,
//	           cancel handler, socket options)
//	libpool    the same, Acquire and Release of that Manager's pool around each cycle (its
//	           health check's peek)
//	lock, try  Manager.Lock or TryLock + Lock.Unlock
//
// Each iteration is a round: every row runs one untimed cycle, then 200 timed cycles,
// interleaved cycle by cycle with the other rows' (the order rotating), so that a burst
// of load from other jobs falls on every row alike. A row's figure for the round is the
// median of its cycles over the floor's median in the same round; it reports the median
// of those over the rounds, and logs min / median / max. Run it with -benchtime Nx (N
// rounds).
func BenchmarkPooledLadder(b *testing.B) {
	rows := ladderRows(b)
	ratios := make([][]float64, len(rows))
	var floors []float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		took := make([][]float64, len(rows))
		for _, row := range rows {
			row.run()
		}
		for c := 0; c < 200; c++ {
			for j := range rows {
				k := (c + j) % len(rows)
				start := time.Now()
				rows[k].run()
				took[k] = append(took[k], float64(time.Since(start).Nanoseconds())/1e3)
			}
		}
		floor := medianOf(took[0])
		floors = append(floors, floor)
		for k := range rows {
			ratios[k] = append(ratios[k], medianOf(took[k])/floor)
		}
	}
	b.StopTimer()
	for k, row := range rows {
		sort.Float64s(ratios[k])
		med := medianOf(ratios[k])
		b.ReportMetric(med, "x-"+row.name)
		b.Logf("%-8s %.3f / %.3f / %.3f x  (floor median %.0f µs, %d rounds)", row.name, ratios[k][0], med,
			ratios[k][len(ratios[k])-1], medianOf(floors), len(floors))
	}
}

// medianOf returns the median of v, which it sorts.
func medianOf(v []float64) float64 {
	sort.Float64s(v)
	return v[len(v)/2]
}

type ladderRow struct {
	name string
	run  func()
}

// ladderRows opens what BenchmarkPooledLadder's rows use, each on its own connection
// through one PgBouncer in transaction mode; all is closed when b ends.
func ladderRows(b *testing.B) []ladderRow {
	pgtest.Need(b, srv, startErr)
	pb := pgtest.PgBouncerForTest(b, srv, pgtest.PoolTransaction)
	ctx := context.Background()
	dsn := pgtest.WithPairs(pb.DSN(), "default_query_exec_mode=exec")
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(b, err)
	b.Cleanup(func() { conn.Close(ctx) })
	plain, err := pgxpool.New(ctx, pgtest.WithPairs(dsn, "pool_max_conns=1"))
	require.NoError(b, err)
	b.Cleanup(plain.Close)
	newM := func(opts ...advisory.Option) *advisory.Manager {
		m, err := advisory.New(ctx, pgtest.WithPairs(pb.DSN(), "pool_max_conns=1"), opts...)
		require.NoError(b, err)
		b.Cleanup(m.Close)
		require.Equal(b, advisory.HoldingTransaction, m.Holding())
		return m
	}
	m, textM := newM(), newM()
	libConn, err := advisory.PoolForTest(newM()).Acquire(ctx)
	require.NoError(b, err)
	b.Cleanup(libConn.Release)
	name := b.Name()
	text := advisory.TxLockTextForTest(m, name+"/raw", false)
	cycleOn := func(pg *pgconn.PgConn, sql string) {
		_, err := pg.Exec(ctx, sql).ReadAll()
		if err == nil {
			_, err = pg.Exec(ctx, "COMMIT").ReadAll()
		}
		if err != nil {
			b.Fatal(err)
		}
	}
	pooled := func(p *pgxpool.Pool) func() {
		return func() {
			c, err := p.Acquire(ctx)
			if err != nil {
				b.Fatal(err)
			}
			cycleOn(c.Conn().PgConn(), text)
			c.Release()
		}
	}
	floor := fmt.Sprintf("BEGIN; SELECT pg_catalog.pg_advisory_xact_lock(%d)", advisory.KeyOf(name+"/floor"))
	return []ladderRow{
		{"floor", func() { cycleOn(conn.PgConn(), floor) }},
		{"text", func() { cycleOn(conn.PgConn(), text) }},
		{"pgxpool", pooled(plain)},
		{"libconn", func() { cycleOn(libConn.Conn().PgConn(), text) }},
		{"libpool", pooled(advisory.PoolForTest(textM))},
		{"lock", func() { cycle(b, m, (*advisory.Manager).Lock, ctx, name) }},
		{"try", func() { cycle(b, m, (*advisory.Manager).TryLock, ctx, name) }},
	}
}
