package advgoose_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"testing"
	"testing/fstest"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advgoose "github.com/pgadvisory/advisory/contrib/goose"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// pooledDatabase returns a database of t's own (database), an admin pool on it, and its
// DSN through a real PgBouncer 1.18 in transaction mode: the DSN alone, nothing added for
// the pooler.
func pooledDatabase(t *testing.T) (string, *pgxpool.Pool) {
	t.Helper()
	direct, admin := database(t)
	cfg, err := pgconn.ParseConfig(direct)
	require.NoError(t, err)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(12))
	return pgtest.WithParams(b.DSN(), map[string]string{"dbname": cfg.Database}), admin
}

// concurrentMigrations have a migration marked NO TRANSACTION that builds an index
// concurrently (it cannot run in a transaction block) and writes its row of applied.
var concurrentMigrations = fstest.MapFS{
	"00001_items.sql": {Data: []byte(`-- +goose Up
CREATE TABLE items (id int, price int);
INSERT INTO applied (version, app) VALUES (1, current_setting('application_name'));
-- +goose Down
DROP TABLE items;
`)},
	"00002_index.sql": {Data: []byte(`-- +goose NO TRANSACTION
-- +goose Up
CREATE INDEX CONCURRENTLY items_by_price ON items (price);
INSERT INTO applied (version, app) VALUES (2, current_setting('application_name'));
-- +goose Down
DROP INDEX CONCURRENTLY items_by_price;
`)},
	"00003_after.sql": {Data: []byte(`-- +goose Up
INSERT INTO applied (version, app) VALUES (3, current_setting('application_name'));
-- +goose Down
SELECT 1;
`)},
}

// TestNoTransactionMigrationThroughAPooler (issue 43): five goose Providers, each with
// its own Manager, *sql.DB (advgoose.OpenDB) and Locker, start at once with only a
// PgBouncer transaction pool's DSN and run Up on migrations one of which is marked NO
// TRANSACTION and runs CREATE INDEX CONCURRENTLY, under each way to install the Locker.
// Each migration is applied once, the index is valid, nobody waits past the bound (the
// index build waited for the holding's snapshot before item 6), and no advisory lock is
// left on a server connection afterwards.
func TestNoTransactionMigrationThroughAPooler(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			dsn, admin := pooledDatabase(t)
			const n = 5
			type result struct {
				applied int
				err     error
			}
			results := make(chan result, n)
			start := make(chan struct{})
			began := time.Now()
			for range n {
				go func() {
					<-start
					k, err := providerUp(dsn, mode.session)
					results <- result{k, err}
				}()
			}
			close(start)
			applied := 0
			for i := range n {
				select {
				case r := <-results:
					require.NoError(t, r.err)
					applied += r.applied
				case <-time.After(90 * time.Second):
					t.Fatalf("%d of %d Providers still running after 90 s (hung)", n-i, n)
				}
			}
			took := time.Since(began)
			assert.Equal(t, 3, applied, "migrations applied in all")
			assert.Len(t, appliedOnce(t, admin), 3)
			assert.Equal(t, 1, count(t, admin, `SELECT count(*) FROM pg_index
				WHERE indexrelid = 'items_by_price'::regclass AND indisvalid`), "the concurrently built index is valid")
			assert.Zero(t, count(t, admin, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
				AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`),
				"advisory locks left on the database's server connections")
			t.Logf("5 Providers through the pooler (%s): done in %v", mode.name, took.Round(time.Millisecond))
		})
	}
}

// providerUp is a replica's start-up through dsn alone: a Manager, goose's *sql.DB from
// OpenDB, a Provider of concurrentMigrations with a Locker, Up bounded by a minute. It
// returns how many migrations it applied; everything is closed before it returns.
func providerUp(dsn string, session bool) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		return 0, err
	}
	defer m.Close()
	if m.Holding() != advisory.HoldingTransaction {
		return 0, errors.New("the Manager does not hold by transaction: no transaction pooler seen")
	}
	db, err := advgoose.OpenDB(m, dsn)
	if err != nil {
		return 0, err
	}
	defer db.Close()
	lk := advgoose.New(m, "migrations")
	opt := goose.WithLocker(lk)
	if session {
		opt = goose.WithSessionLocker(lk)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, concurrentMigrations, opt)
	if err != nil {
		return 0, err
	}
	ctx, cancelLoss := lk.Context(ctx)
	defer cancelLoss()
	rs, err := p.Up(ctx)
	return len(rs), err
}

// envExample makes the test binary run Example, with DATABASE_URL as it finds it.
const envExample = "ADVGOOSE_EXAMPLE"

// TestExampleThroughAPooler (issue 43, item 9): docs/migrations.md's goose snippet (the
// Example: TestDocsShowTheExample ties them) run verbatim by five processes started at
// once, with DATABASE_URL a PgBouncer transaction pool's DSN and nothing added for it.
// Each prints the version and exits 0 within the bound; the migration is recorded once.
// (With sql.Open("pgx", dsn), the snippet's earlier form, pgx's prepared statements
// failed there.)
func TestExampleThroughAPooler(t *testing.T) {
	dsn, admin := pooledDatabase(t)
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
		assert.Equal(t, "schema at version 1\n", outs[i].String(), "replica %d", i)
	}
	took := time.Since(began)
	assert.Equal(t, 1, count(t, admin, "SELECT count(*) FROM goose_db_version WHERE version_id = 1"))
	assert.Zero(t, count(t, admin, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
		AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`))
	t.Logf("5 processes ran the Example through the pooler in %v", took.Round(time.Millisecond))
}
