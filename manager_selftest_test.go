package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/advisorytest"
)

// TestNewRefusesAServerThatDoesNotEnforceLocks: a real PostgreSQL made to behave like an
// engine whose advisory locks are stubs (CockroachDB) or silenced no-ops (YugabyteDB): in
// a database of its own, pg_catalog's pg_try_advisory_lock and pg_advisory_unlock are
// replaced by functions that grant every call. New refuses it with ErrUnsupportedServer
// and leaves nothing held or open; the same database with the real functions is accepted.
// (A stub earlier in the search_path no longer reaches the library at all: see
// TestServerFunctionsCannotBeShadowed.)
func TestNewRefusesAServerThatDoesNotEnforceLocks(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db := advisorytest.DSN(t)
	m, err := advisory.New(ctx, db)
	require.NoError(t, err, "the real functions enforce")
	m.Close()

	owner, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	t.Cleanup(func() { owner.Close(context.Background()) })
	_, err = owner.Exec(ctx, `
		CREATE OR REPLACE FUNCTION pg_catalog.pg_try_advisory_lock(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
		CREATE OR REPLACE FUNCTION pg_catalog.pg_advisory_unlock(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true'`)
	require.NoError(t, err)
	_, err = advisory.New(ctx, db)
	require.ErrorIs(t, err, advisory.ErrUnsupportedServer)
	assert.Contains(t, err.Error(), "granted the same advisory lock to two sessions")
	eventually(t, 10*time.Second, func() bool {
		var n int
		require.NoError(t, owner.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&n))
		return n == 0
	}, "the refused Manager's connections closed")
}
