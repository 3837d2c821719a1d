package advgoose_test

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"fmt"
	"os"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", goose's usual one
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advgoose "github.com/pgadvisory/advisory/contrib/goose"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The module's tests get their PostgreSQL from the root module's harness (internal/pgtest:
// ADVISORY_TEST_DSN, else testcontainers, else a throwaway local cluster), and each test
// a database of its own. The Examples use DATABASE_URL, set here to the server's own
// database when it is not set.
var (
	srv      *pgtest.Server
	startErr error
)

func TestMain(m *testing.M) {
	if os.Getenv(envVictim) != "" { // re-executed by TestFiveProvidersOneSIGKILLed
		os.Exit(victimMain())
	}
	if os.Getenv(envExample) != "" { // re-executed by TestExampleThroughAPooler as a replica
		Example()
		os.Exit(0)
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	return pgtest.Suite{Srv: &srv, Err: &startErr, Setup: func(_ context.Context, s *pgtest.Server) (func(), error) {
		if os.Getenv("DATABASE_URL") == "" { // for the examples
			os.Setenv("DATABASE_URL", s.DSN())
		}
		return nil, nil
	}}.Run(m)
}

// database creates a database for t alone, dropped when t ends, and returns its
// connection string and an admin pool on it.
func database(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	b := make([]byte, 8)
	rand.Read(b)
	name := "advgoose_" + hex.EncodeToString(b)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	root, err := pgxpool.New(ctx, srv.DSN())
	require.NoError(t, err)
	_, err = root.Exec(ctx, "CREATE DATABASE "+name)
	require.NoError(t, err)
	dsn := pgtest.WithParams(srv.DSN(), map[string]string{"dbname": name})
	admin, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() {
		admin.Close()
		defer root.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		for {
			root.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = $1 AND pid <> pg_backend_pid()", name)
			_, err := root.Exec(ctx, "DROP DATABASE IF EXISTS "+name)
			if err == nil || ctx.Err() != nil {
				require.NoError(t, err)
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	})
	_, err = admin.Exec(ctx, `CREATE TABLE applied (version int, app text, at timestamptz DEFAULT clock_timestamp())`)
	require.NoError(t, err)
	return dsn, admin
}

// migrations are the tests' goose migrations. Each writes a row of applied (created by
// database) in its own transaction; migration 2 then sleeps for the seconds of the
// session's advgoose_test.sleep setting (none by default), which the tests set in a
// connection string's options to make one holder slow, or, where options cannot be set
// (through PgBouncer), in its application_name as "sleep=N".
var migrations = fstest.MapFS{
	"00001_items.sql": {Data: []byte(`-- +goose Up
CREATE TABLE items (id int);
INSERT INTO applied (version, app) VALUES (1, current_setting('application_name'));
-- +goose Down
DROP TABLE items;
`)},
	"00002_price.sql": {Data: []byte(`-- +goose Up
INSERT INTO applied (version, app) VALUES (2, current_setting('application_name'));
ALTER TABLE items ADD COLUMN price int;
SELECT pg_sleep(coalesce(nullif(current_setting('advgoose_test.sleep', true), ''),
	substring(current_setting('application_name') from 'sleep=([0-9]+)'), '0')::float8);
-- +goose Down
ALTER TABLE items DROP COLUMN price;
`)},
	"00003_index.sql": {Data: []byte(`-- +goose Up
CREATE INDEX items_by_price ON items (price);
INSERT INTO applied (version, app) VALUES (3, current_setting('application_name'));
-- +goose Down
DROP INDEX items_by_price;
`)},
}

// slow is dsn with migration 2 sleeping for the given seconds, under application_name app.
func slow(dsn string, seconds int, app string) string {
	return pgtest.WithParams(dsn, map[string]string{
		"options": fmt.Sprintf("-c advgoose_test.sleep=%d", seconds), "application_name": app})
}

// newManager returns a Manager on dsn, closed when t ends.
func newManager(t testing.TB, dsn string, opts ...advisory.Option) *advisory.Manager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := advisory.New(ctx, dsn, opts...)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// openDB returns goose's *sql.DB on dsn, closed when t ends.
func openDB(t testing.TB, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open("pgx", dsn)
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return db
}

// newProvider returns a Provider of migrations on dsn with lk installed as a
// SessionLocker (session) or a Locker.
func newProvider(t testing.TB, dsn string, lk *advgoose.Locker, session bool) *goose.Provider {
	t.Helper()
	opt := goose.WithLocker(lk)
	if session {
		opt = goose.WithSessionLocker(lk)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, openDB(t, dsn), migrations, opt)
	require.NoError(t, err)
	return p
}

// modes are the two ways to install a Locker.
var modes = []struct {
	name    string
	session bool
}{{"SessionLocker", true}, {"Locker", false}}

// appliedOnce checks that each migration is recorded once by goose and wrote its row of
// applied once, and returns the application_name each row was written under.
func appliedOnce(t *testing.T, admin *pgxpool.Pool) map[int]string {
	t.Helper()
	ctx := context.Background()
	rows, err := admin.Query(ctx, `SELECT version_id, count(*) FROM goose_db_version WHERE version_id > 0 GROUP BY 1 ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var v, n int64
		require.NoError(t, rows.Scan(&v, &n))
		require.EqualValues(t, 1, n, "goose_db_version rows of version %d", v)
	}
	require.NoError(t, rows.Err())
	apps := map[int]string{}
	rows, err = admin.Query(ctx, `SELECT version, app FROM applied ORDER BY at`)
	require.NoError(t, err)
	for rows.Next() {
		var v int
		var app string
		require.NoError(t, rows.Scan(&v, &app))
		require.NotContains(t, apps, v, "migration %d wrote its row twice", v)
		apps[v] = app
	}
	require.NoError(t, rows.Err())
	return apps
}
