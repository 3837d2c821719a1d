package advmigrate_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advmigrate "github.com/pgadvisory/advisory/contrib/migrate"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// pooledDB returns a fresh database (freshDB, with the own_tx table migration 3 of
// testdata/pooled writes), a direct connection to it, and its DSN through a real PgBouncer
// 1.18 in transaction mode: the DSN alone, nothing added for the pooler.
func pooledDB(t *testing.T) (*pgx.Conn, string) {
	t.Helper()
	direct := freshDB(t, 0)
	conn := connect(t, direct)
	_, err := conn.Exec(ctxT(t), "CREATE TABLE own_tx (app text, advisory_locks int)")
	require.NoError(t, err)
	cfg, err := pgconn.ParseConfig(direct)
	require.NoError(t, err)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(12))
	return conn, pgtest.WithParams(b.DSN(), map[string]string{"dbname": cfg.Database})
}

// TestReplicasStartedAtOnceThroughAPooler (issue 43, items 7 and 8): five replicas, each
// with its own Manager and driver, start at once with only a PgBouncer transaction pool's
// DSN, from the constructor on (advmigrate.Open), and run Up on testdata/pooled:
// golang-migrate's own example migration CREATE UNIQUE INDEX CONCURRENTLY (which cannot
// run in a transaction block), a migration with its own BEGIN ... COMMIT, and one after
// it. Nobody hangs (golang-migrate's constructor lock would strand on a pooled server
// connection), each migration runs once, the index is valid, the file's COMMIT ended its
// own transaction on the driver's connection (no advisory lock there, the holding's tag
// for that transaction) and not the holding (migration 4 ran under it), and no advisory
// lock is left on any server connection afterwards.
func TestReplicasStartedAtOnceThroughAPooler(t *testing.T) {
	t.Parallel()
	conn, dsn := pooledDB(t)
	const n = 5
	errs := make(chan error, n)
	start := make(chan struct{})
	began := time.Now()
	for i := 0; i < n; i++ {
		go func() { <-start; errs <- replicaUp(dsn, "file://testdata/pooled", t.Name()) }()
	}
	close(start)
	ran := 0
	for i := 0; i < n; i++ {
		select {
		case err := <-errs:
			if err == nil {
				ran++
			} else {
				assert.ErrorIs(t, err, migrate.ErrNoChange)
			}
		case <-time.After(90 * time.Second):
			t.Fatalf("%d of %d replicas still running after 90 s (hung)", n-i, n)
		}
	}
	took := time.Since(began)
	assert.Equal(t, 1, ran, "replicas that applied migrations")
	applied, version, dirty := state(t, conn)
	assert.Equal(t, []int{1, 3, 4}, applied, "each migration once (2 writes no row)")
	assert.Equal(t, 4, version)
	assert.False(t, dirty)
	ctx := ctxT(t)
	var valid bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT indisvalid FROM pg_index
		WHERE indexrelid = 'users_email_index'::regclass AND indisunique`).Scan(&valid))
	assert.True(t, valid, "the concurrently built unique index is valid")
	var app string
	var locks int
	require.NoError(t, conn.QueryRow(ctx, "SELECT app, advisory_locks FROM own_tx").Scan(&app, &locks))
	assert.Zero(t, locks, "migration 3 ran on the driver's connection, not in the holding's transaction")
	assert.Regexp(t, "^pgadv/", app, "migration 3's own transaction carried the holding's tag")
	assert.Zero(t, advisoryLocks(t, conn), "advisory locks left on the database's server connections")
	t.Logf("5 replicas through the pooler: done in %v, migration 3 ran as %q", took.Round(time.Millisecond), app)
}

// replicaUp is a replica's start-up through dsn alone: a Manager, the driver from
// advmigrate.Open, Up on src; everything closed before it returns.
func replicaUp(dsn, src, name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer m.Close()
	if m.Holding() != advisory.HoldingTransaction {
		return errors.New("the Manager does not hold by transaction: no transaction pooler seen")
	}
	d, err := advmigrate.Open(ctx, m, dsn, name, &migratepgx.Config{}, advmigrate.WithWait(50*time.Second))
	if err != nil {
		return err
	}
	mg, err := migrate.NewWithDatabaseInstance(src, "pgx5", d)
	if err != nil {
		d.Close()
		return err
	}
	defer mg.Close()
	mg.LockTimeout = 55 * time.Second
	return mg.Up()
}

// advisoryLocks counts the advisory locks held on conn's database by other sessions.
func advisoryLocks(t testing.TB, conn *pgx.Conn) int {
	t.Helper()
	var n int
	require.NoError(t, conn.QueryRow(ctxT(t), `SELECT count(*) FROM pg_locks
		WHERE locktype = 'advisory' AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		AND pid <> pg_backend_pid()`).Scan(&n))
	return n
}

// TestWrapRefusedBehindAPooler (issue 43, item 8): behind a transaction pooler, Wrap
// refuses a driver built by golang-migrate's own constructor, naming the safe one, and
// leaves it open.
func TestWrapRefusedBehindAPooler(t *testing.T) {
	t.Parallel()
	_, dsn := pooledDB(t)
	m := newManager(t, dsn)
	require.True(t, m.Bounds().TransactionPooler)
	d, err := advmigrate.Open(ctxT(t), m, dsn, t.Name(), nil)
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	_, err = advmigrate.Wrap(d, m, t.Name())
	require.ErrorIs(t, err, advisory.ErrPooler)
	assert.Contains(t, err.Error(), "advmigrate.Open(ctx, m, dsn, name")
	_, err = d.Open("pgx5://unused")
	require.ErrorIs(t, err, advisory.ErrPooler)
	_, _, err = d.Version()
	assert.NoError(t, err, "the refused driver is still open")
}

// envExample makes the test binary run Example, with DATABASE_URL as it finds it.
const envExample = "ADVMIGRATE_EXAMPLE"

// TestExampleThroughAPooler (issue 43, item 9): the README's and docs/migrations.md's
// snippet (the Example: TestDocsShowTheExample ties them) run verbatim by five processes
// started at once, with DATABASE_URL a PgBouncer transaction pool's DSN and nothing added
// for it. Each prints "migrated" and exits 0 within the bound, the migration is recorded
// once and clean, and no advisory lock is left on a server connection. (The snippet's
// earlier form, sql.Open and golang-migrate's WithInstance, failed there: pgx's prepared
// statements, the constructor's session lock.)
func TestExampleThroughAPooler(t *testing.T) {
	t.Parallel()
	conn, dsn := pooledDB(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	cmds := make([]*exec.Cmd, 5)
	outs := make([]*bytes.Buffer, len(cmds))
	began := time.Now()
	for i := range cmds {
		cmds[i] = exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmds[i].Env = append(os.Environ(), envExample+"=1", "DATABASE_URL="+dsn)
		outs[i] = new(bytes.Buffer)
		cmds[i].Stdout, cmds[i].Stderr = outs[i], outs[i]
		require.NoError(t, cmds[i].Start())
	}
	for i, cmd := range cmds {
		err := cmd.Wait()
		require.NoError(t, ctx.Err(), "replica %d still running after 90 s (hung): %s", i, outs[i])
		require.NoError(t, err, "replica %d: %s", i, outs[i])
		assert.Equal(t, "migrated\n", outs[i].String(), "replica %d", i)
	}
	took := time.Since(began)
	var version int
	var dirty bool
	require.NoError(t, conn.QueryRow(ctxT(t), "SELECT version, dirty FROM schema_migrations").Scan(&version, &dirty))
	assert.Equal(t, 1, version)
	assert.False(t, dirty)
	assert.Zero(t, advisoryLocks(t, conn), "advisory locks left on the database's server connections")
	t.Logf("5 processes ran the Example through the pooler in %v", took.Round(time.Millisecond))
}
