package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// pooledConfig is the transaction-holding cycle through a real PgBouncer (issue 47):
// the library's Lock + Unlock and TryLock + Unlock against the fastest correct raw cycle
// through the same pooler, two round trips: BEGIN and the lock as one simple-protocol
// message, then COMMIT.
type pooledConfig struct {
	rounds, cycles, warmups int
	placements              string
	variants                bool
	profile                 string
}

// pooledRow is one cycle through the pooler. floor is the index of the row it is
// compared with (itself for a floor).
type pooledRow struct {
	name   string
	floor  int
	open   func(ctx context.Context, dsn string) (cycle func(context.Context) error, done func(), err error)
	vals   []float64            // this round's samples, µs
	ratios map[string][]float64 // per placement: this row's median over its floor's, one per round
	micros map[string][]float64 // per placement: this row's median, µs, one per round
}

// The texts of the raw rows. The settings are those a transaction holding carried
// before issue 47 (New's defaults, PostgreSQL 15): a second SELECT of eight set_config.
const (
	pooledSettings = "SELECT pg_catalog.set_config('tcp_keepalives_idle', '10', true), " +
		"pg_catalog.set_config('tcp_keepalives_interval', '5', true), pg_catalog.set_config('tcp_keepalives_count', '4', true), " +
		"pg_catalog.set_config('tcp_user_timeout', '30000', true), pg_catalog.set_config('lock_timeout', '0', true), " +
		"pg_catalog.set_config('statement_timeout', '0', true), pg_catalog.set_config('idle_in_transaction_session_timeout', '0', true), " +
		"pg_catalog.set_config('client_connection_check_interval', '1000', true); "
	pooledSetLocal = "SET LOCAL tcp_keepalives_idle = 10; SET LOCAL tcp_keepalives_interval = 5; SET LOCAL tcp_keepalives_count = 4; " +
		"SET LOCAL tcp_user_timeout = 30000; SET LOCAL lock_timeout = 0; SET LOCAL statement_timeout = 0; " +
		"SET LOCAL idle_in_transaction_session_timeout = 0; SET LOCAL client_connection_check_interval = 1000; "
	pooledLibLock = "SELECT pg_catalog.pg_backend_pid(), CASE WHEN NOT pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_advisory_xact_lock(%d) IS NOT NULL END"
	pooledInLock  = "SELECT pg_catalog.pg_backend_pid(), CASE WHEN pg_catalog.set_config('tcp_keepalives_idle', '10', true) IS NULL " +
		"OR pg_catalog.set_config('tcp_keepalives_interval', '5', true) IS NULL OR pg_catalog.set_config('tcp_keepalives_count', '4', true) IS NULL " +
		"OR pg_catalog.set_config('tcp_user_timeout', '30000', true) IS NULL OR pg_catalog.set_config('lock_timeout', '0', true) IS NULL " +
		"OR pg_catalog.set_config('idle_in_transaction_session_timeout', '0', true) IS NULL THEN NULL " +
		"WHEN NOT pg_catalog.pg_is_in_recovery() THEN pg_catalog.pg_advisory_xact_lock(%d) IS NOT NULL END"
)

// pooledRows are the rows: the two floors, the library's two cycles, and with variants
// the old three-round-trip floor and the raw cycle carrying the settings in other forms.
func pooledRows(variants bool) []*pooledRow {
	rows := []*pooledRow{
		{name: "raw, 2 round trips: BEGIN; SELECT pg_advisory_xact_lock(k), then COMMIT", floor: 0,
			open: rawPooled("BEGIN; SELECT pg_catalog.pg_advisory_xact_lock(%d)")},
		{name: "raw, 2 round trips: BEGIN; SELECT pg_try_advisory_xact_lock(k), then COMMIT", floor: 1,
			open: rawPooled("BEGIN; SELECT pg_catalog.pg_try_advisory_xact_lock(%d)")},
		{name: "advisory Lock + Unlock", floor: 0, open: managerPooled(false)},
		{name: "advisory TryLock + Unlock", floor: 1, open: managerPooled(true)},
	}
	if !variants {
		return rows
	}
	return append(rows,
		&pooledRow{name: "raw, 3 round trips: BEGIN, SELECT pg_advisory_xact_lock(k), COMMIT", floor: 0,
			open: rawPooled3},
		&pooledRow{name: "raw, 2 round trips, the 8 settings as a second SELECT of set_config", floor: 0,
			open: rawPooled("BEGIN; " + pooledSettings + "SELECT pg_catalog.pg_advisory_xact_lock(%d)")},
		&pooledRow{name: "raw, 2 round trips, the 8 settings as SET LOCAL statements", floor: 0,
			open: rawPooled("BEGIN; " + pooledSetLocal + "SELECT pg_catalog.pg_advisory_xact_lock(%d)")},
		&pooledRow{name: "raw, 2 round trips, no settings, the library's lock SELECT (pid, standby check)", floor: 0,
			open: rawPooled("BEGIN; " + pooledLibLock)},
		&pooledRow{name: "raw, 2 round trips, the library's text before issue 47", floor: 0,
			open: rawPooled("BEGIN; " + pooledSettings + pooledLibLock)},
		&pooledRow{name: "raw, 2 round trips, SET LOCAL x8 and the library's lock SELECT", floor: 0,
			open: rawPooled("BEGIN; " + pooledSetLocal + pooledLibLock)},
		&pooledRow{name: "raw, 2 round trips, SET LOCAL of the 4 timeouts and checks only (no keepalive)", floor: 0,
			open: rawPooled("BEGIN; SET LOCAL lock_timeout = 0; SET LOCAL statement_timeout = 0; " +
				"SET LOCAL idle_in_transaction_session_timeout = 0; SET LOCAL client_connection_check_interval = 1000; " + pooledLibLock)},
		&pooledRow{name: "raw, 2 round trips, SET LOCAL x2, 6 set_config in the lock SELECT", floor: 0,
			open: rawPooled("BEGIN; SET LOCAL statement_timeout = 0; SET LOCAL client_connection_check_interval = 1000; " + pooledInLock)},
	)
}

// rawPooled is a raw cycle on a plain pgconn: text (its %d the key) as one simple-protocol
// message, then COMMIT.
func rawPooled(text string) func(context.Context, string) (func(context.Context) error, func(), error) {
	return func(ctx context.Context, dsn string) (func(context.Context) error, func(), error) {
		c, err := pgconn.Connect(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		lock := fmt.Sprintf(text, advisory.KeyOf(text))
		cycle := func(ctx context.Context) error {
			if _, err := c.Exec(ctx, lock).ReadAll(); err != nil {
				return err
			}
			_, err := c.Exec(ctx, "COMMIT").ReadAll()
			return err
		}
		return cycle, func() { c.Close(context.Background()) }, nil
	}
}

// rawPooled3 is the floor the benchmark used before issue 47: BEGIN, the lock and COMMIT
// as three messages (what pgx's Begin, Exec and Commit send).
func rawPooled3(ctx context.Context, dsn string) (func(context.Context) error, func(), error) {
	c, err := pgconn.Connect(ctx, dsn)
	if err != nil {
		return nil, nil, err
	}
	lock := fmt.Sprintf("SELECT pg_catalog.pg_advisory_xact_lock(%d)", advisory.KeyOf("raw3"))
	cycle := func(ctx context.Context) error {
		for _, sql := range []string{"BEGIN", lock, "COMMIT"} {
			if _, err := c.Exec(ctx, sql).ReadAll(); err != nil {
				return err
			}
		}
		return nil
	}
	return cycle, func() { c.Close(context.Background()) }, nil
}

// managerPooled is the library's cycle on a Manager of its own, made on the pooler's DSN.
func managerPooled(try bool) func(context.Context, string) (func(context.Context) error, func(), error) {
	return func(ctx context.Context, dsn string) (func(context.Context) error, func(), error) {
		m, err := advisory.New(ctx, dsn)
		if err != nil {
			return nil, nil, err
		}
		if m.Holding() != advisory.HoldingTransaction {
			m.Close()
			return nil, nil, fmt.Errorf("the Manager holds by %v, not by transaction", m.Holding())
		}
		name := fmt.Sprintf("pooled/%v", try)
		cycle := func(ctx context.Context) error { return lockCycle(ctx, m, name) }
		if try {
			cycle = func(ctx context.Context) error { return tryCycle(ctx, m, name) }
		}
		return cycle, m.Close, nil
	}
}

// runPooled starts a server and a PgBouncer in transaction mode in front of it, and runs
// cfg.rounds rounds: in each, for every placement, every row's connections are opened
// afresh (and PgBouncer's server connections too: RECONNECT), warmed, and timed cycle by
// cycle, the rows' order rotating. It prints each row's per-round ratios to its floor.
func runPooled(ctx context.Context, cfg pooledConfig, out io.Writer) error {
	pls, err := choosePlacements(cfg.placements)
	if err != nil {
		return err
	}
	srv, err := pgtest.Start(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	pb, err := pgtest.StartPgBouncer(ctx, srv, pgtest.PoolTransaction)
	if err != nil {
		return err
	}
	defer pb.Close()
	env, err := newPooledEnv(ctx, srv, pb)
	if err != nil {
		return err
	}
	defer env.close()
	if cfg.profile != "" {
		f, err := os.Create(cfg.profile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	rows := pooledRows(cfg.variants)
	start, load := time.Now(), loadAverage()
	for r := 0; r < cfg.rounds; r++ {
		for _, pl := range pls {
			if err := env.round(ctx, cfg, pl, rows, r); err != nil {
				return fmt.Errorf("round %d, %s: %w", r+1, pl.Name, err)
			}
		}
		fmt.Fprintf(os.Stderr, "round %d/%d done (%v)\n", r+1, cfg.rounds, time.Since(start).Round(time.Second))
	}
	fmt.Fprintf(out, "PgBouncer 1.18 (transaction mode, pool of %d) in front of PostgreSQL 15 on loopback; %d rounds of %d cycles a row "+
		"(after %d untimed), rows interleaved cycle by cycle, connections and Managers opened afresh every round and placement; "+
		"window %v; load average %s → %s\n\n", pgtest.PgBouncerPoolSize, cfg.rounds, cfg.cycles, cfg.warmups,
		time.Since(start).Round(time.Second), load, loadAverage())
	printPooled(out, rows, pls)
	return nil
}

// printPooled prints, per placement, each row's median µs (median of the rounds') and its
// per-round ratio to its floor as min / median / max.
func printPooled(out io.Writer, rows []*pooledRow, pls []placement) {
	head := "| cycle |"
	for _, pl := range pls {
		head += " " + pl.Name + " |"
	}
	fmt.Fprintln(out, head)
	fmt.Fprintln(out, "|---"+strings.Repeat("|---", len(pls))+"|")
	for _, row := range rows {
		line := "| " + row.name + " |"
		for _, pl := range pls {
			rs := row.ratios[pl.Name]
			line += fmt.Sprintf(" %.0f µs", median(row.micros[pl.Name]))
			if row.floor != rowIndex(rows, row) {
				line += fmt.Sprintf(", %.2f / %.2f / %.2fx", minOf(rs), median(rs), maxOf(rs))
			}
			line += " |"
		}
		fmt.Fprintln(out, line)
	}
}

func rowIndex(rows []*pooledRow, row *pooledRow) int {
	for i, r := range rows {
		if r == row {
			return i
		}
	}
	return -1
}

func minOf(v []float64) float64 { return quantileOf(v, 0) }
func maxOf(v []float64) float64 { return quantileOf(v, 1) }
