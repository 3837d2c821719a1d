package advisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestFencingStatementsIgnoreTheSearchPath: a role whose search_path puts a schema ahead
// of pg_catalog with its own bigint + integer (which subtracts) and bigint = bigint
// (always true) still gets increasing tokens, and a stale token is still refused: the
// fencing statements call pg_catalog's operators (the CVE-2018-1058 pattern).
func TestFencingStatementsIgnoreTheSearchPath(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	schema := "evil_" + advisory.KeyOf(t.Name()).String()[1:]
	table := "fence_sp_" + advisory.KeyOf(t.Name()).String()[1:]
	s := pgx.Identifier{schema}.Sanitize()
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+s+" CASCADE; DROP TABLE IF EXISTS public."+table)
	})
	_, err := admin.Exec(ctx, `CREATE SCHEMA `+s+`;
		CREATE FUNCTION `+s+`.minus(bigint, integer) RETURNS bigint LANGUAGE sql AS 'SELECT $1 - $2';
		CREATE OPERATOR `+s+`.+ (LEFTARG = bigint, RIGHTARG = integer, FUNCTION = `+s+`.minus);
		CREATE FUNCTION `+s+`.yes(bigint, bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
		CREATE OPERATOR `+s+`.= (LEFTARG = bigint, RIGHTARG = bigint, FUNCTION = `+s+`.yes)`)
	require.NoError(t, err)
	m := newManager(t, []string{"search_path=" + schema + ", pg_catalog, public"}, advisory.WithFenceTable("public", table))
	require.NoError(t, m.CreateFenceTable(ctx))
	// Another lock's row first, with token 1: a forged = would read it for any key.
	other, err := m.LockKey(ctx, advisory.KeyOf(t.Name()+"/other"))
	require.NoError(t, err)
	_, err = other.Token(ctx)
	require.NoError(t, err)
	require.NoError(t, other.Unlock(ctx))

	var last int64
	for i := 0; i < 3; i++ {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		tok, err := l.Token(ctx)
		require.NoError(t, err)
		require.Greater(t, tok, last, "holding %d", i)
		last = tok
		require.NoError(t, l.Unlock(ctx))
	}
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, "SET LOCAL search_path = "+s+", pg_catalog, public")
	require.NoError(t, err)
	require.ErrorIs(t, m.CheckToken(ctx, tx, t.Name(), 1), advisory.ErrStaleToken, "a stale token, read through a forged =")
	require.NoError(t, m.CheckToken(ctx, tx, t.Name(), last))
	requireNoAcquired(t, m)
}
