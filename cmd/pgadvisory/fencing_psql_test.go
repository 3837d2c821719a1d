package main_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// psqlMigration is the fenced shell migration of docs/migrations.md, as run's CMD: it
// ignores SIGTERM (a command that stalls or will not stop), says it started ($1), waits
// for $2 to exist, then writes $PGADVISORY_TOKEN into table $3 in one transaction that
// first checks the token, and records psql's exit code in $4.
const psqlMigration = `trap '' TERM
touch "$1"
while [ ! -e "$2" ]; do sleep 0.05; done
psql -X -q -v ON_ERROR_STOP=1 --single-transaction -d "$DATABASE_URL" <<SQL
SELECT token FROM $PGADVISORY_FENCE_TABLE
 WHERE key = $PGADVISORY_KEY AND NOT pair AND token = $PGADVISORY_TOKEN FOR SHARE \gset
INSERT INTO $3 (token) VALUES ($PGADVISORY_TOKEN);
SQL
echo $? > "$4"`

// TestRunTokenFencesAPsqlMigration: the recipe writes while its run holds the lock; and
// when the run's session is terminated while the command (ignoring SIGTERM) stalls, and
// a newer holder has taken a token, the command's write is refused: no stale row.
func TestRunTokenFencesAPsqlMigration(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("psql is not installed: the recipe under test is a psql script")
	}
	table := fenceTable(t)
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	rows := "fence_rows_" + strings.TrimPrefix(advisory.KeyOf(t.Name()).String(), "-")
	_, err = conn.Exec(ctx, "DROP TABLE IF EXISTS "+rows+"; CREATE TABLE "+rows+" (token bigint NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() { // conn is closed by then (deferred)
		if c, err := pgx.Connect(context.Background(), dsn(t)); err == nil {
			c.Exec(context.Background(), "DROP TABLE IF EXISTS "+rows)
			c.Close(context.Background())
		}
	})

	dir := t.TempDir()
	file := func(n string) string { return filepath.Join(dir, n) }
	require.NoError(t, os.WriteFile(file("go1"), nil, 0o600))
	r := cli(t, "run", "--token", "--fence-table", table, "--name", t.Name(), "--",
		"sh", "-c", psqlMigration, "sh", file("started1"), file("go1"), rows, file("psql1"))
	require.Equal(t, 0, r.code, r.stderr)
	requireFile(t, file("psql1"), "0\n")

	// The stalled holder: its session is terminated, B takes the lock and a token.
	p := start(t, "run", "--token", "--fence-table", table, "--grace", "60s", "--holder-name", "stale-run",
		"--name", t.Name(), "--", "sh", "-c", psqlMigration, "sh", file("started2"), file("go2"), rows, file("psql2"))
	m, err := advisory.New(ctx, dsn(t), advisory.WithFenceTable(strings.Split(table, ".")...))
	require.NoError(t, err)
	defer m.Close()
	h := waitHeldByApp(t, m, t.Name(), "stale-run")
	require.Eventually(t, func() bool { _, err := os.Stat(file("started2")); return err == nil },
		20*time.Second, 5*time.Millisecond)
	_, err = conn.Exec(ctx, "SELECT pg_terminate_backend($1)", h.PID)
	require.NoError(t, err)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	tokB, err := l.Token(ctx)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(file("go2"), nil, 0o600))
	res := wait(t, p)
	assert.Equal(t, 76, res.code, "the lock was lost while the command ran: %s", res.stderr)
	assert.Equal(t, "3\n", readFile(t, file("psql2")), "psql stopped (ON_ERROR_STOP): the token was stale")

	var tokens []int64
	rs, err := conn.Query(ctx, "SELECT token FROM "+rows+" ORDER BY token")
	require.NoError(t, err)
	tokens, err = pgx.CollectRows(rs, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, tokens, 1, "only the first run's row; no stale row")
	assert.Less(t, tokens[0], tokB)
	require.NoError(t, l.Unlock(ctx))
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	require.NoError(t, err)
	return string(b)
}

func requireFile(t *testing.T, name, want string) {
	t.Helper()
	require.Equal(t, want, readFile(t, name), name)
}
