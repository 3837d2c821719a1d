package main_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// envScript writes the fencing variables CMD sees to $1, one per line ("unset" if not set).
const envScript = `for v in PGADVISORY_KEY PGADVISORY_TOKEN PGADVISORY_FENCE_TABLE; do
  eval "printf '%s\n' \"\${$v-unset}\""; done > "$1"`

// fenceTable creates a fencing table of t's own with init-fencing and drops it when t ends.
func fenceTable(t *testing.T) string {
	t.Helper()
	table := "fence_cli_" + strings.TrimPrefix(advisory.KeyOf(t.Name()).String(), "-")
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn(t))
		if err == nil {
			conn.Exec(context.Background(), "DROP TABLE IF EXISTS public."+table)
			conn.Close(context.Background())
		}
	})
	for i := 0; i < 2; i++ { // the second run finds it there and is fine with that
		r := cli(t, "init-fencing", "--fence-table", "public."+table)
		require.Equal(t, 0, r.code, r.stderr)
		assert.Contains(t, r.stdout, `fencing table "public"."`+table+`" is ready`)
	}
	return "public." + table
}

// runEnv runs CMD under the lock with extra run flags and returns what envScript saw.
func runEnv(t *testing.T, flags ...string) []string {
	t.Helper()
	out := filepath.Join(t.TempDir(), "env")
	args := append(append([]string{"run", "--name", t.Name()}, flags...), "--", "sh", "-c", envScript, "sh", out)
	r := cli(t, args...)
	require.Equal(t, 0, r.code, r.stderr)
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	return strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
}

// TestRunExportsTheToken: with --token, CMD sees the key, a token that grows from one run
// to the next and is the one in the table, and the table's name quoted for SQL.
func TestRunExportsTheToken(t *testing.T) {
	t.Parallel()
	table := fenceTable(t)
	key := advisory.KeyOf(t.Name()).String()
	first := runEnv(t, "--token", "--fence-table", table)
	second := runEnv(t, "--token", "--fence-table", table)
	require.Len(t, first, 3)
	require.Len(t, second, 3)
	assert.Equal(t, key, first[0], "PGADVISORY_KEY")
	assert.Equal(t, strings.Replace(`"public"."T"`, "T", strings.TrimPrefix(table, "public."), 1), first[2])
	t1, err := strconv.ParseInt(first[1], 10, 64)
	require.NoError(t, err, "PGADVISORY_TOKEN %q", first[1])
	t2, err := strconv.ParseInt(second[1], 10, 64)
	require.NoError(t, err, "PGADVISORY_TOKEN %q", second[1])
	assert.Greater(t, t2, t1, "tokens increase across runs")

	conn, err := pgx.Connect(context.Background(), dsn(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var inTable int64
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT token FROM "+second[2]+" WHERE key = "+second[0]).Scan(&inTable))
	assert.Equal(t, t2, inTable, "the newest token is the table's")

	plain := runEnv(t)
	assert.Equal(t, []string{key, "unset", "unset"}, plain, "without --token: the key only, no row taken")
}

// TestRunTokenWithoutTheTable: a clear message that says how to create the table, exit
// 69, CMD not started, and the lock released.
func TestRunTokenWithoutTheTable(t *testing.T) {
	t.Parallel()
	marker := filepath.Join(t.TempDir(), "ran")
	r := cli(t, "run", "--token", "--fence-table", "no_such_schema_x.fence", "--name", t.Name(),
		"--", "touch", marker)
	assert.Equal(t, 69, r.code, r.stderr)
	assert.Contains(t, r.stderr, `the fencing table "no_such_schema_x"."fence" does not exist`)
	assert.Contains(t, r.stderr, "pgadvisory init-fencing --fence-table no_such_schema_x.fence")
	assert.NoFileExists(t, marker, "the command was not started")

	conn, err := pgx.Connect(context.Background(), dsn(t))
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var exists bool
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT to_regclass('advisory_fence') IS NOT NULL").Scan(&exists))
	if exists {
		t.Skip("the default table advisory_fence exists on this server: its hint cannot be shown")
	}
	r = cli(t, "run", "--token", "--name", t.Name(), "--", "touch", marker)
	assert.Equal(t, 69, r.code, r.stderr)
	assert.Contains(t, r.stderr, `the fencing table "advisory_fence" does not exist`)
	assert.Contains(t, r.stderr, "Create it once (it needs the CREATE privilege on the schema) with: pgadvisory init-fencing\n")
	assert.NoFileExists(t, marker, "the command was not started")
}

// TestRunTokenOnAnOldTable: a fencing table of an earlier version's layout (key bigint
// primary key) is refused with a message that says how to upgrade it, exit 69, CMD not
// started; init-fencing upgrades it, keeping its tokens, and run --token then works.
func TestRunTokenOnAnOldTable(t *testing.T) {
	t.Parallel()
	table := "fence_cli_old_" + strings.TrimPrefix(advisory.KeyOf(t.Name()).String(), "-")
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	t.Cleanup(func() {
		if c, err := pgx.Connect(context.Background(), dsn(t)); err == nil {
			c.Exec(context.Background(), "DROP TABLE IF EXISTS public."+table)
			c.Close(context.Background())
		}
	})
	_, err = conn.Exec(ctx, "DROP TABLE IF EXISTS public."+table+"; CREATE TABLE public."+table+
		" (key bigint PRIMARY KEY, token bigint NOT NULL, taken_at timestamptz NOT NULL DEFAULT now())")
	require.NoError(t, err)
	_, err = conn.Exec(ctx, "INSERT INTO public."+table+" (key, token) VALUES ($1, 5)", int64(advisory.KeyOf(t.Name())))
	require.NoError(t, err)

	marker := filepath.Join(t.TempDir(), "ran")
	r := cli(t, "run", "--token", "--fence-table", "public."+table, "--name", t.Name(), "--", "touch", marker)
	assert.Equal(t, 69, r.code, r.stderr)
	assert.Contains(t, r.stderr, "has the layout of an earlier version")
	assert.Contains(t, r.stderr, "Upgrade it once (it needs ownership of the table) with: pgadvisory init-fencing --fence-table public."+table)
	assert.NoFileExists(t, marker, "the command was not started")

	r = cli(t, "init-fencing", "--fence-table", "public."+table)
	require.Equal(t, 0, r.code, r.stderr)
	env := runEnv(t, "--token", "--fence-table", "public."+table)
	require.Len(t, env, 3)
	assert.Equal(t, "6", env[1], "PGADVISORY_TOKEN: the old row's 5, plus one")
}

// TestFencingUsageErrors: bad fencing flags are usage errors, found before connecting.
func TestFencingUsageErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--token", "--shared", "--name", "k", "--", "true"}, "run: --token needs an exclusive lock: a shared lock has no fencing token: " +
			"shared holders hold at once, so no token can say which is newest; take the lock exclusively for fenced writes"},
		{[]string{"run", "--fence-table", "t", "--name", "k", "--", "true"}, "run: --fence-table is used only with --token"},
		{[]string{"run", "--token", "--fence-table", "a.b.c", "--name", "k", "--", "true"}, "want TABLE or SCHEMA.TABLE"},
		{[]string{"run", "--token", "--fence-table", ".t", "--name", "k", "--", "true"}, "each name must be 1 to 63 bytes"},
		{[]string{"init-fencing", "--fence-table", strings.Repeat("x", 64)}, "init-fencing: --fence-table"},
		{[]string{"init-fencing", "extra"}, `init-fencing: unexpected argument "extra"`},
	} {
		r := noDB(t, tc.args...)
		assert.Equal(t, 64, r.code, "%q: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, "%q", tc.args)
		assert.Contains(t, r.stderr, "--help' for usage.", "%q", tc.args)
	}
}
