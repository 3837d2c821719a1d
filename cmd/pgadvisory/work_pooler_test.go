package main_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestRunWorkThroughASessionPooler (issue 37, item 6): run holds the lock on a direct
// connection (--dsn), and its command connects through a session-mode PgBouncer
// ($DATABASE_URL), which refuses an options startup parameter: the command gets no
// PGOPTIONS, connects, and its session carries the tag. With DATABASE_URL the lock's own
// server, PGOPTIONS is still given (TestRunGivesTheCommandItsWorkIdentity).
func TestRunWorkThroughASessionPooler(t *testing.T) {
	t.Parallel()
	needPsql(t)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolSession)
	script := `printf '%s\n' "$PGOPTIONS"
psql -X -A -t -q -d "$DATABASE_URL" -c "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"`
	r := wait(t, startEnv(t, []string{"DATABASE_URL=" + b.DSN(), "PGOPTIONS="},
		"run", "--dsn", dsn(t), "--name", t.Name(), "--", "sh", "-c", script))
	require.Equal(t, 0, r.code, "stdout: %s\nstderr: %s", r.stdout, r.stderr)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 2, r.stdout)
	assert.Empty(t, lines[0], "no PGOPTIONS for a command aimed at a pooler")
	assert.Regexp(t, pooledWorkTag, lines[1], "the command's session carries the tag, with the pooled mark: "+
		"the pooler is not the lock's own address")
}
