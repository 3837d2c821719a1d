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
