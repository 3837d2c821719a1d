package advmigrate_test

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	_ "github.com/golang-migrate/migrate/v4/source/file"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	_ "github.com/jackc/pgx/v5/stdlib"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advmigrate "github.com/pgadvisory/advisory/contrib/migrate"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The module's tests get their PostgreSQL from the root module's harness (internal/pgtest:
// ADVISORY_TEST_DSN, else testcontainers, else a throwaway local cluster). Go allows the
// import: this module's path lies under the root module's, as internal/'s rule asks.
var (
	srv      *pgtest.Server
	startErr error
)

func TestMain(m *testing.M) {
	if os.Getenv(envHelper) != "" { // re-executed by TestSIGKILLedHolder as the holder
		os.Exit(helperMain())
	}
	if os.Getenv(envExample) != "" { // re-executed by TestExampleThroughAPooler as a replica
		Example()
		os.Exit(0)
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	// The example reads DATABASE_URL, as a user's program would; it gets a database of its
	// own.
	return pgtest.Suite{Srv: &srv, Err: &startErr, Setup: func(ctx context.Context, _ *pgtest.Server) (func(), error) {
		u, err := createDB(ctx, "advmigrate_example")
		if err != nil {
			return nil, err
		}
		os.Setenv("DATABASE_URL", u)
		return nil, nil
	}}.Run(m)
}

// createDB (re)creates database name on the test server and returns its URL.
func createDB(ctx context.Context, name string) (string, error) {
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		return "", err
	}
	defer conn.Close(ctx)
	for _, q := range []string{"DROP DATABASE IF EXISTS %s WITH (FORCE)", "CREATE DATABASE %s"} {
		if _, err := conn.Exec(ctx, fmt.Sprintf(q, pgx.Identifier{name}.Sanitize())); err != nil {
			return "", err
		}
	}
	cfg, err := pgconn.ParseConfig(srv.DSN())
	if err != nil {
		return "", err
	}
	u := url.URL{Scheme: "postgres", Host: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), Path: "/" + name,
		RawQuery: "sslmode=disable", User: url.UserPassword(cfg.User, cfg.Password)}
	if cfg.TLSConfig != nil {
		u.RawQuery = "sslmode=require"
	}
	return u.String(), nil
}

func dropDB(t testing.TB, name string) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	conn, err := pgx.Connect(ctx, srv.DSN())
	if err == nil {
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	}
	if err != nil {
		t.Errorf("drop database %s: %v", name, err)
	}
}

// freshDB creates a database for one test, with the side tables the migrations in
// testdata/migrations write to: applied (one row per migration run) and migration_sleep
// (how long migration 2 sleeps). It returns its URL.
func freshDB(t *testing.T, sleep time.Duration) string {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	ctx := ctxT(t)
	name := fmt.Sprintf("advmigrate_%d", time.Now().UnixNano())
	u, err := createDB(ctx, name)
	require.NoError(t, err)
	t.Cleanup(func() { dropDB(t, name) })
	conn := connect(t, u)
	_, err = conn.Exec(ctx, "CREATE TABLE applied (version int NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp());"+
		"CREATE TABLE migration_sleep (seconds float8 NOT NULL)")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO migration_sleep VALUES ($1)", sleep.Seconds())
	require.NoError(t, err)
	return u
}

func connect(t testing.TB, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func newManager(t testing.TB, dsn string) *advisory.Manager {
	t.Helper()
	m, err := advisory.New(ctxT(t), dsn)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// newMigrate returns a Migrate of testdata/migrations on the database at dsn, through the
// pgx/v5 driver wrapped to lock name with m; closed when the test ends.
func newMigrate(t testing.TB, dsn string, m *advisory.Manager, name string, opts ...advmigrate.Option) (*migrate.Migrate, *advmigrate.Driver) {
	t.Helper()
	mg, d, err := openMigrate(dsn, m, name, opts...)
	require.NoError(t, err)
	t.Cleanup(func() { mg.Close() })
	return mg, d
}

// Behind a transaction pooler the driver comes from advmigrate.Open (Wrap refuses
// golang-migrate's own constructor there); elsewhere from that constructor and Wrap.
func openMigrate(dsn string, m *advisory.Manager, name string, opts ...advmigrate.Option) (*migrate.Migrate, *advmigrate.Driver, error) {
	d, err := openDriver(dsn, m, name, opts...)
	if err != nil {
		return nil, nil, err
	}
	mg, err := migrate.NewWithDatabaseInstance("file://testdata/migrations", "pgx5", d)
	if err != nil {
		d.Close()
		return nil, nil, err
	}
	return mg, d, nil
}

func openDriver(dsn string, m *advisory.Manager, name string, opts ...advmigrate.Option) (*advmigrate.Driver, error) {
	if m.Bounds().TransactionPooler {
		return advmigrate.Open(context.Background(), m, dsn, name, &migratepgx.Config{}, opts...)
	}
	db, err := sql.Open("pgx/v5", dsn)
	if err != nil {
		return nil, err
	}
	inner, err := migratepgx.WithInstance(db, &migratepgx.Config{})
	if err != nil {
		db.Close()
		return nil, err
	}
	d, err := advmigrate.Wrap(inner, m, name, opts...)
	if err != nil {
		inner.Close()
		return nil, err
	}
	return d, nil
}

// state returns the applied table's versions in order, and schema_migrations' row.
func state(t testing.TB, conn *pgx.Conn) (applied []int, version int, dirty bool) {
	t.Helper()
	ctx := ctxT(t)
	rows, err := conn.Query(ctx, "SELECT version FROM applied ORDER BY at")
	require.NoError(t, err)
	applied, err = pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	require.NoError(t, conn.QueryRow(ctx, "SELECT version, dirty FROM schema_migrations").Scan(&version, &dirty))
	return applied, version, dirty
}

// eventually fails t unless cond holds within limit.
func eventually(t testing.TB, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
	}
}

// sleeper returns the pid and application_name of the backend sleeping in migration 2 on
// conn's database, 0 if none. It waits in pg_sleep (pg_stat_activity's query shows the
// whole file from its start, before the sleep: a holder killed then could still commit).
func sleeper(t testing.TB, conn *pgx.Conn) (pid uint32, app string) {
	t.Helper()
	err := conn.QueryRow(ctxT(t), `SELECT pid, application_name FROM pg_stat_activity
		WHERE datname = current_database() AND wait_event = 'PgSleep' AND pid <> pg_backend_pid()`).Scan(&pid, &app)
	if err == pgx.ErrNoRows {
		return 0, ""
	}
	require.NoError(t, err)
	return pid, app
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}
