package main_test

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestDSNWithAnotherSchemeIsAUsageError (issue 21, item 10): pgx reads a string that is not
// a postgres:// or postgresql:// URL as key=value settings, so golang-migrate's
// pgx5://postgres@127.0.0.1:5432/d1 once ended on the default Unix socket: "cannot connect
// to /var/run/postgresql:5432", exit 69. It is a usage error that names the scheme and the
// fix, from --dsn and from $DATABASE_URL alike, and never prints the password.
func TestDSNWithAnotherSchemeIsAUsageError(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		env  []string
		args []string
		want []string
	}{
		{[]string{"DATABASE_URL="}, []string{"status", "--dsn", "pgx5://postgres@127.0.0.1:5432/d1"},
			[]string{"(from --dsn) is a pgx5:// URL", "write postgres://", "x- parameters"}},
		{[]string{"DATABASE_URL="}, []string{"status", "--dsn", "pgx5://postgres:s3cret@127.0.0.1:5432/d1"},
			[]string{"(from --dsn) is a pgx5:// URL", "write postgres://", "x- parameters"}},
		{[]string{"DATABASE_URL=pgx://postgres:s3cret@127.0.0.1:5432/d1?x-migrations-table=m"},
			[]string{"run", "--name", "m", "--", "true"},
			[]string{"(from $DATABASE_URL) is a pgx:// URL", "write postgres://", "x- parameters"}},
		{[]string{"DATABASE_URL="}, []string{"--dsn", "cockroachdb://root:s3cret@127.0.0.1:26257/d", "break", "--key", "1"},
			[]string{"is a cockroachdb:// URL", "write postgres://"}},
		{[]string{"DATABASE_URL=mysql://root:s3cret@tcp(127.0.0.1:3306)/d"}, []string{"status"},
			[]string{"is a mysql:// URL"}},
	} {
		r := wait(t, startEnv(t, tc.env, tc.args...))
		assert.Equal(t, 64, r.code, "%q %q: %s", tc.env, tc.args, r.stderr)
		for _, want := range tc.want {
			assert.Contains(t, r.stderr, want, "%q %q", tc.env, tc.args)
		}
		assert.NotContains(t, r.stderr, "/var/run/postgresql", "%q", tc.args)
		assert.NotContains(t, r.stderr, "cannot connect", "%q", tc.args)
		assert.NotContains(t, r.stderr+r.stdout, "s3cret", "%q: the password is never printed", tc.args)
	}
}

// advisoryPrefix finds the library's "advisory:" prefix, but not "pgadvisory:".
var advisoryPrefix = regexp.MustCompile(`(^|[^g])advisory:`)

// TestStatementPoolerIsNamedNotCalledUnreachable (issue 21, item 10; issue 36): behind
// PgBouncer in statement mode, where no lock can be held, every command that connects
// exits 69 with a message that says it reached a statement-pooling proxy and what to do,
// never "cannot connect" (it did connect) and never the library's "advisory:" prefix,
// once read "cannot connect …: advisory: connect: advisory: connection is behind a
// transaction-pooling proxy". run never starts its command. (Through a transaction
// pooler every command works: see TestRunThroughATransactionPooler.)
func TestStatementPoolerIsNamedNotCalledUnreachable(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolStatement)
	marker := filepath.Join(t.TempDir(), "started")
	for _, args := range [][]string{
		{"status"},
		{"status", "--name", t.Name()},
		{"run", "--name", t.Name(), "--", "touch", marker},
		{"run", "--no-wait", "--name", t.Name(), "--", "touch", marker},
		{"break", "--name", t.Name(), "--yes"},
	} {
		for round := 0; round < 3; round++ {
			r := wait(t, startEnv(t, []string{"DATABASE_URL=" + b.DSN()}, args...))
			assert.Equal(t, 69, r.code, "%q: %s", args, r.stderr)
			assert.Contains(t, r.stderr, "is a statement-pooling proxy", "%q", args)
			assert.Contains(t, r.stderr, "no advisory lock can be held through it", "%q", args)
			assert.Contains(t, r.stderr, "transaction or session pooling", "%q", args)
			assert.NotContains(t, r.stderr, "cannot connect", "%q", args)
			assert.False(t, advisoryPrefix.MatchString(r.stderr), "%q: the library's prefix: %s", args, r.stderr)
			t.Logf("%q: %s", args, r.stderr)
		}
	}
	_, err := os.Stat(marker)
	require.ErrorIs(t, err, os.ErrNotExist, "run started its command behind the pooler")
}
