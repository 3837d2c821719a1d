package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// migrateSQL is a slow migration as a migration tool runs it: it records its start in an
// autocommitted row (the command's first statement), finds out from a version table
// whether it has been applied already (then exits 0), else applies it in ONE transaction
// sent as one multi-statement query (\;), as golang-migrate sends a migration file: the
// server runs it to the end without reading from the client again, so a killed psql's
// transaction can still commit unless its backend is stopped.
const migrateSQL = `INSERT INTO drain_mig_log (round, kind, ts, pid, app)
  VALUES (:'round', 'start', clock_timestamp(), pg_backend_pid(), current_setting('application_name'));
SELECT EXISTS (SELECT 1 FROM drain_mig_version WHERE round = :'round') AS done \gset
\if :done
\echo migration already applied
\q
\endif
BEGIN \;
ALTER TABLE :"items" ADD COLUMN price numeric \;
SELECT pg_sleep(:sleep) \;
INSERT INTO drain_mig_version (round, version) VALUES (:'round', 1) \;
INSERT INTO drain_mig_log (round, kind, ts, pid, app)
  VALUES (:'round', 'commit', clock_timestamp(), pg_backend_pid(), current_setting('application_name')) \;
COMMIT;
`

// migrateSleep is how long the migration's transaction runs (psql's pg_sleep argument).
const migrateSleep = "3"

// migrationSchema creates the tables the rounds share, if missing; a round forgets its
// own rows when it starts and ends.
func migrationSchema(t *testing.T) {
	t.Helper()
	_, err := pgxExec(t, `CREATE TABLE IF NOT EXISTS drain_mig_log (round text NOT NULL, kind text NOT NULL,
		ts timestamptz NOT NULL, pid int NOT NULL, app text NOT NULL);
		CREATE TABLE IF NOT EXISTS drain_mig_version (round text PRIMARY KEY, version int NOT NULL)`)
	require.NoError(t, err)
}

// migrationRow is a row of drain_mig_log: a migration's start or its commit.
type migrationRow struct {
	kind string
	ts   time.Time // the server's clock_timestamp()
	pid  uint32
	app  string
}

// migrationRound is one round: workers runs of `pgadvisory run -- psql -f migrate.sql`
// at once, the holder's pgadvisory SIGKILLed while its migration's transaction sleeps.
type migrationRound struct {
	name    string // also the user's PGAPPNAME prefix of its workers: name + "-w" + i
	pattern string // application_name LIKE pattern of the workers' psql sessions
	workers int
	env     []string // more environment for the workers
}

// roundResult is what a round left: the runs, the rows, the backends seen.
type roundResult struct {
	results  []result // by worker
	killed   int      // the worker whose pgadvisory was SIGKILLed
	deadPID  uint32   // the killed worker's psql backend, in its transaction
	rows     []migrationRow
	seen     map[uint32]backendSeen
	applied  int  // rows in the version table
	hasPrice bool // the migration's column exists
}

// run plays the round with the pgadvisory binary at path bin.
func (mr migrationRound) run(t *testing.T) roundResult {
	t.Helper()
	dir := t.TempDir()
	script := filepath.Join(dir, "migrate.sql")
	require.NoError(t, os.WriteFile(script, []byte(migrateSQL), 0o644))
	items := "drain_items_" + strings.ReplaceAll(mr.name, "-", "_")
	forget := fmt.Sprintf(`DROP TABLE IF EXISTS %s; DELETE FROM drain_mig_log WHERE round = '%[2]s';
		DELETE FROM drain_mig_version WHERE round = '%[2]s'`, items, mr.name)
	_, err := pgxExec(t, forget+"; CREATE TABLE "+items+" (id int)")
	require.NoError(t, err)
	t.Cleanup(func() { pgxExec(t, forget) })

	obs := observe(t, mr.pattern)
	procs := make([]*proc, mr.workers)
	for i := range procs {
		app := fmt.Sprintf("%s-w%d", mr.name, i)
		env := append([]string{"DATABASE_URL=" + dsn(t), "PGAPPNAME=" + app}, mr.env...)
		procs[i] = startEnv(t, env,
			"run", "--name", mr.name, "--holder-name", app, "--",
			"psql", "-X", "-q", "-v", "ON_ERROR_STOP=1", "-v", "round="+mr.name, "-v", "items="+items,
			"-v", "sleep="+migrateSleep, "-d", dsn(t), "-f", script)
	}
	var res roundResult
	var app string
	res.deadPID, app = sleepingMigration(t, mr.pattern)
	res.killed = mr.worker(app)
	require.GreaterOrEqual(t, res.killed, 0, "whose migration is %q?", app)
	require.NoError(t, procs[res.killed].cmd.Process.Signal(syscall.SIGKILL))
	for _, p := range procs {
		res.results = append(res.results, wait(t, p))
	}
	res.seen = obs.end(t)
	res.rows = migrationRows(t, mr.name)
	require.NoError(t, adminQuery(t, "SELECT count(*) FROM drain_mig_version WHERE round = $1", mr.name).Scan(&res.applied))
	require.NoError(t, adminQuery(t, `SELECT EXISTS (SELECT 1 FROM information_schema.columns
		WHERE table_name = $1 AND column_name = 'price')`, items).Scan(&res.hasPrice))
	return res
}

// sleepingMigration waits until a migration's transaction sleeps, and returns its
// backend's pid and application_name.
func sleepingMigration(t *testing.T, pattern string) (uint32, string) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var pid uint32
	var app string
	require.Eventually(t, func() bool {
		err := conn.QueryRow(context.Background(), `SELECT pid, application_name FROM pg_stat_activity
			WHERE application_name LIKE $1 AND wait_event = 'PgSleep'`, pattern).Scan(&pid, &app)
		return err == nil
	}, 60*time.Second, 2*time.Millisecond, "no migration ever slept")
	return pid, app
}

func migrationRows(t *testing.T, round string) []migrationRow {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rs, err := conn.Query(context.Background(),
		"SELECT kind, ts, pid, app FROM drain_mig_log WHERE round = $1 ORDER BY ts", round)
	require.NoError(t, err)
	rows, err := pgx.CollectRows(rs, func(r pgx.CollectableRow) (migrationRow, error) {
		var m migrationRow
		err := r.Scan(&m.kind, &m.ts, &m.pid, &m.app)
		return m, err
	})
	require.NoError(t, err)
	return rows
}

// of returns the rows of one kind, in server-clock order.
func (res roundResult) of(kind string) []migrationRow {
	var out []migrationRow
	for _, r := range res.rows {
		if r.kind == kind {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ts.Before(out[j].ts) })
	return out
}

// worker is the index of the worker whose psql session had application_name app.
func (mr migrationRound) worker(app string) int {
	for i := mr.workers - 1; i >= 0; i-- {
		if strings.HasSuffix(app, fmt.Sprintf("%s-w%d", mr.name, i)) {
			return i
		}
	}
	return -1
}
