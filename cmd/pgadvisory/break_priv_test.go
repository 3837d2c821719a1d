package main_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// breakPassword is the roles' password: it must never be printed.
const breakPassword = "s3cret-Break-pw"

// tempRole creates a LOGIN role (not a superuser) for the test, dropped at its end with
// its sessions, and returns its name and a DSN that logs in as it.
func tempRole(t *testing.T, prefix string) (string, string) {
	t.Helper()
	ctx := context.Background()
	admin, err := pgx.Connect(ctx, dsn(t))
	require.NoError(t, err)
	defer admin.Close(ctx)
	role := fmt.Sprintf("%s_%d", prefix, rand.Uint32())
	_, err = admin.Exec(ctx, fmt.Sprintf("CREATE ROLE %s LOGIN PASSWORD '%s'", role, breakPassword))
	require.NoError(t, err)
	t.Cleanup(func() {
		admin, err := pgx.Connect(ctx, dsn(t))
		require.NoError(t, err)
		defer admin.Close(ctx)
		admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		_, err = admin.Exec(ctx, "DROP ROLE "+role)
		assert.NoError(t, err)
	})
	return role, pgtest.WithPairs(dsn(t), "user="+role, "password="+breakPassword)
}

// TestBreakSaysWhichPrivilegeIsMissing: a role without the privilege is refused before
// anything is asked or terminated, with the role it needs; pg_signal_backend then suffices
// for a non-superuser's session, never for a superuser's.
func TestBreakSaysWhichPrivilegeIsMissing(t *testing.T) {
	t.Parallel()
	me, myDSN := tempRole(t, "breaker")
	other, otherDSN := tempRole(t, "holder")
	superKey, userKey := advisory.KeyOf(t.Name()+"-super"), advisory.KeyOf(t.Name()+"-user")
	_, superPID := rawHolder(t, dsn(t), superKey, false, "super-holder")
	_, userPID := rawHolder(t, otherDSN, userKey, false, "user-holder")
	breakAs := func(name string) result {
		return wait(t, startEnv(t, []string{"DATABASE_URL=" + myDSN}, "break", "--name", name, "--yes"))
	}

	r := breakAs(t.Name() + "-user")
	assert.Equal(t, 77, r.code, r.stderr)
	assert.Contains(t, r.stderr, fmt.Sprintf(`terminating backend pid %d (role "%s") takes superuser, `+
		`membership in pg_signal_backend (GRANT pg_signal_backend TO "%s"), or membership in role "%s"`,
		userPID, other, me, other))
	assert.Contains(t, r.stderr, "nothing was terminated")
	assert.Equal(t, []uint32{userPID}, holders(t, userKey))

	r = breakAs(t.Name() + "-super")
	assert.Equal(t, 77, r.code, r.stderr)
	assert.Contains(t, r.stderr, fmt.Sprintf(`backend pid %d belongs to superuser role`, superPID))
	assert.Contains(t, r.stderr, "only a superuser may terminate it")

	_, err := pgxExec(t, "GRANT pg_signal_backend TO "+me)
	require.NoError(t, err)
	r = breakAs(t.Name() + "-super")
	assert.Equal(t, 77, r.code, "pg_signal_backend does not reach a superuser's session: %s", r.stderr)
	assert.Equal(t, []uint32{superPID}, holders(t, superKey))
	r = breakAs(t.Name() + "-user")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Empty(t, holders(t, userKey))

	for _, r := range []result{r, breakAs(t.Name() + "-super")} {
		assert.NotContains(t, r.stdout+r.stderr, breakPassword)
	}
}

func pgxExec(t *testing.T, sql string) (int64, error) {
	conn, err := pgx.Connect(context.Background(), dsn(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	tag, err := conn.Exec(context.Background(), sql)
	return tag.RowsAffected(), err
}

// TestBreakIgnoresFunctionsAheadOfPgCatalog (issue 21, item 5, for the CLI's own
// statements): a role whose search_path puts a schema of stubs ahead of pg_catalog, with a
// pg_terminate_backend that terminates nothing and says true, and an "=" on int4 that is
// always true. break names pg_catalog's: the holder is terminated and nobody else is.
// With the bare names the stub "=" matched every session in the privilege check, and break
// refused with a false "permission denied" about another role's backend; past that check
// the stub pg_terminate_backend would have reported a termination that never happened.
func TestBreakIgnoresFunctionsAheadOfPgCatalog(t *testing.T) {
	t.Parallel()
	me, myDSN := tempRole(t, "pathbreaker")
	_, otherDSN := tempRole(t, "pathholder")
	schema := fmt.Sprintf("stubs_%d", rand.Uint32())
	for _, sql := range []string{
		"CREATE SCHEMA " + schema,
		"CREATE FUNCTION " + schema + ".pg_terminate_backend(integer, bigint DEFAULT 0) RETURNS boolean " +
			"LANGUAGE sql AS 'SELECT true'",
		"CREATE FUNCTION " + schema + ".int4_any_eq(integer, integer) RETURNS boolean LANGUAGE sql AS 'SELECT true'",
		"CREATE OPERATOR " + schema + ".= (LEFTARG = integer, RIGHTARG = integer, FUNCTION = " + schema + ".int4_any_eq)",
		"GRANT USAGE ON SCHEMA " + schema + " TO " + me,
		"GRANT pg_signal_backend TO " + me,
		"ALTER ROLE " + me + " SET search_path = " + schema + ", pg_catalog, public",
	} {
		_, err := pgxExec(t, sql)
		require.NoError(t, err, sql)
	}
	t.Cleanup(func() { pgxExec(t, "DROP SCHEMA "+schema+" CASCADE") }) // before the roles are dropped
	key := advisory.KeyOf(t.Name())
	_, holderPID := rawHolder(t, otherDSN, key, false, "path-holder")
	_, bystanderPID := rawHolder(t, otherDSN, advisory.KeyOf(t.Name()+"-other"), false, "bystander")

	r := wait(t, startEnv(t, []string{"DATABASE_URL=" + myDSN}, "break", "--name", t.Name(), "--yes", "--wait", "3s"))
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("terminated backend pid %d", holderPID))
	assert.Contains(t, r.stdout, "is free now")
	assert.Empty(t, holders(t, key), "pg_locks after the break")
	assert.Equal(t, []uint32{bystanderPID}, holders(t, advisory.KeyOf(t.Name()+"-other")), "nobody else was terminated")
}
