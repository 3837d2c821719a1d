package pgtest_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestStandby: the helper makes a real streaming hot standby: in recovery, read-only,
// replaying what the primary writes; after Promote it is a primary that takes writes.
func TestStandby(t *testing.T) {
	t.Parallel()
	primary := server(t)
	ctx := ctxT(t)
	sb := pgtest.StandbyForTest(t, primary)
	p, s := connect(t, primary.DSN()), connect(t, sb.DSN())
	assert.False(t, inRecovery(t, p))
	assert.True(t, inRecovery(t, s), "the standby is in recovery")

	table := pgx.Identifier{"pgtest_standby_" + t.Name()}.Sanitize()
	_, err := p.Exec(ctx, "CREATE TABLE "+table+" (v text); INSERT INTO "+table+" VALUES ('from the primary')")
	require.NoError(t, err)
	t.Cleanup(func() { p.Exec(context.Background(), "DROP TABLE "+table) })
	require.NoError(t, sb.CatchUp(ctx))
	var v string
	require.NoError(t, s.QueryRow(ctx, "SELECT v FROM "+table).Scan(&v))
	assert.Equal(t, "from the primary", v)
	_, err = s.Exec(ctx, "INSERT INTO "+table+" VALUES ('on the standby')")
	require.Error(t, err, "a hot standby is read-only")

	require.NoError(t, sb.Promote(ctx))
	assert.False(t, inRecovery(t, s), "promoted")
	_, err = s.Exec(ctx, "INSERT INTO "+table+" VALUES ('on the new primary')")
	require.NoError(t, err)
}

func inRecovery(t testing.TB, conn *pgx.Conn) bool {
	t.Helper()
	var r bool
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT pg_is_in_recovery()").Scan(&r))
	return r
}
