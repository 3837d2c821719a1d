package advisory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestNewRefusesAServerThatDoesNotEnforceLocks: a real PostgreSQL made to behave like an
// engine whose advisory locks are stubs (CockroachDB) or silenced no-ops (YugabyteDB): a
// role whose search_path puts a schema with a pg_try_advisory_lock that grants every
// call ahead of pg_catalog. New refuses it with ErrUnsupportedServer and leaves nothing
// held or open; the same role with the real functions is accepted.
func TestNewRefusesAServerThatDoesNotEnforceLocks(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	schema := fmt.Sprintf("stub_%d", rand.Uint32())
	role := tempRole(t)
	_, err := admin.Exec(ctx, `CREATE SCHEMA `+schema+`;
		CREATE FUNCTION `+schema+`.pg_try_advisory_lock(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
		CREATE FUNCTION `+schema+`.pg_advisory_unlock(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
		GRANT USAGE ON SCHEMA `+schema+` TO `+role)
	require.NoError(t, err)
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP SCHEMA "+schema+" CASCADE") })
	roleDSN := dsn(t, "user="+role, "password=pw")

	m, err := advisory.New(ctx, roleDSN)
	require.NoError(t, err, "the real functions enforce")
	m.Close()

	_, err = admin.Exec(ctx, "ALTER ROLE "+role+" SET search_path = "+schema+", pg_catalog")
	require.NoError(t, err)
	_, err = advisory.New(ctx, roleDSN)
	require.ErrorIs(t, err, advisory.ErrUnsupportedServer)
	assert.Contains(t, err.Error(), "granted the same advisory lock to two sessions")
	eventually(t, 10*time.Second, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role).Scan(&n))
		return n == 0
	}, "the refused Manager's connections closed")
}
