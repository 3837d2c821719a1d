package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The demo's stand-in for `migrate up` does what a migration tool does: it connects on its
// own, and applies its steps in one transaction. Each step writes a row of demoTable, so
// that the demo can show at the end which steps were applied, how often, and by whom.

// demoTable is the table the demo's migrations write: one row per applied step. The
// primary key makes a step applied twice fail, as a column added twice does.
const demoTable = "pgadvisory_demo"

const demoCreateTable = `DROP TABLE IF EXISTS ` + demoTable + `;
CREATE TABLE ` + demoTable + ` (step int PRIMARY KEY, worker text NOT NULL)`

// demoStepSQL applies one step: it works on the server for a while (pg_sleep), as a real
// migration statement does, then writes the step's row. The demo's statements name the
// server's functions, relations and operators with their schema (pg_catalog.), so that
// no function of the same name earlier in the search_path runs instead (CVE-2018-1058).
const demoStepSQL = `INSERT INTO ` + demoTable + ` (step, worker) SELECT $1, $2 FROM pg_catalog.pg_sleep($3)`

// demoSteps is the number of steps; demoSlowStep is the slow one (a backfill, an index
// build). The demo stops the first two holders while that step runs on the server, so
// that the holder's backend outlives its client and the next holder has to drain it.
const (
	demoSteps    = 6
	demoSlowStep = 4
)

// demoStepTime is how long a step works on the server. The steps before the slow one take
// 0.35 s each so that, when the slow step starts, the server has just checked whether the
// client is still there: run sets client_connection_check_interval (1 s) through
// PGOPTIONS, and the server checks 1 s after the transaction began, then every second as
// long as statements run. A backend whose client dies as the slow step starts runs on for
// most of the step, longer than the workers' --drain-wait, and the next holder's drain
// terminates it.
func demoStepTime(step int) time.Duration {
	if step == demoSlowStep {
		return time.Second
	}
	return 350 * time.Millisecond
}

// demoMigrate is `pgadvisory demo-migrate WORKER`. It connects as a pgx or libpq tool
// does: DATABASE_URL (set by the demo), completed from the PG* variables, among them the
// PGAPPNAME and PGOPTIONS that run sets to tag the holding's work. It prints a line per
// step; the steps commit together at the end. If its parent (the pgadvisory run that holds
// the lock) dies, the kernel kills it (see supervise), mid-transaction; checking the parent
// at every step is a second line for the demo's sake.
func demoMigrate(args []string, stdout io.Writer) error {
	if len(args) != 1 {
		return fail(exitUsage, "demo-migrate (run by pgadvisory demo): want one argument, the worker's name")
	}
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		return fail(exitUnavailable, "demo-migrate: %v", err)
	}
	defer conn.Close(ctx)
	fmt.Fprintf(stdout, "migration started (process %d, backend pid %d)\n", os.Getpid(), conn.PgConn().PID())
	err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error { return applyDemoSteps(ctx, tx, args[0], stdout) })
	if err != nil {
		return fail(1, "demo-migrate: %v", err)
	}
	fmt.Fprintln(stdout, "migration committed")
	return nil
}

// applyDemoSteps applies the steps in tx.
func applyDemoSteps(ctx context.Context, tx pgx.Tx, worker string, stdout io.Writer) error {
	parent := os.Getppid()
	for i := 1; i <= demoSteps; i++ {
		if _, err := tx.Exec(ctx, demoStepSQL, i, worker, demoStepTime(i).Seconds()); err != nil {
			return fmt.Errorf("step %d: %w", i, err)
		}
		if os.Getppid() != parent {
			return errors.New("the lock holder died: stopping")
		}
		fmt.Fprintf(stdout, "step %d/%d done, not committed yet\n", i, demoSteps)
	}
	return nil
}

// demoRow is a row of demoTable.
type demoRow struct {
	step   int
	worker string
}

// readDemoTable returns demoTable's rows by step, and drops the table (the demo may run on
// an existing server: ADVISORY_TEST_DSN).
func readDemoTable(ctx context.Context, conn *pgx.Conn) ([]demoRow, error) {
	rows, _ := conn.Query(ctx, "SELECT step, worker FROM "+demoTable+" ORDER BY step")
	got, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (demoRow, error) {
		var row demoRow
		return row, r.Scan(&row.step, &row.worker)
	})
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", demoTable, err)
	}
	_, err = conn.Exec(ctx, "DROP TABLE "+demoTable)
	return got, err
}

// describeDemoTable lists rows ("step 1 by worker-3, ...") and says whether they show what
// the lock promises: every step applied exactly once, all by one worker, whose migration
// committed.
func describeDemoTable(rows []demoRow) (list string, ok bool) {
	parts := make([]string, len(rows))
	ok = len(rows) == demoSteps
	for i, r := range rows {
		parts[i] = fmt.Sprintf("step %d by %s", r.step, r.worker)
		ok = ok && r.step == i+1 && r.worker == rows[0].worker
	}
	if len(rows) == 0 {
		return "no rows", false
	}
	return strings.Join(parts, ", "), ok
}
