package main_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// noSettings empties every connection setting pgadvisory reads.
var noSettings = []string{"DATABASE_URL=", "PGHOST=", "PGHOSTADDR=", "PGPORT=", "PGDATABASE=", "PGUSER=", "PGSERVICE="}

// TestNoConnectionSettingsSaySo (issue 37, item 7): with no --dsn, no DATABASE_URL and
// no PG* variable, status said "cannot connect to /var/run/postgresql:5432 (user root,
// database )" and run retried libpq's defaults for 30 s. Both say that nothing was given,
// after one attempt.
func TestNoConnectionSettingsSaySo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"status"},
		{"run", "--name", t.Name(), "--", "echo", "ran"},
		{"break", "--name", t.Name(), "--yes"},
	} {
		r := wait(t, startEnv(t, noSettings, args...))
		if r.code == 0 { // a server answers on libpq's default socket as this user
			continue
		}
		assert.Equal(t, 69, r.code, "%q: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "no --dsn or DATABASE_URL was given, and none of PGHOST,", "%q", args)
		assert.Contains(t, r.stderr, "tried libpq's defaults", "%q", args)
		assert.NotContains(t, r.stderr, "retrying", "%q", args)
		assert.Less(t, r.took, 10*time.Second, "%q: no retries", args)
		assert.Empty(t, r.stdout, "%q", args)
	}
}

// TestConnectFailureIsOneLine (issue 37, item 7): a host that cannot be resolved printed
// pgx's error lines joined by a literal \n\t, after a prefix repeating the target and the
// library's "advisory: connect:". The reason is one line, joined by "; ". The host name
// is invalid, so the resolver answers without asking a DNS server.
func TestConnectFailureIsOneLine(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	r := wait(t, startEnv(t, nil, "status", "--dsn", "host=no!such!host port=5432 user=u dbname=d password=s3cret"))
	assert.Equal(t, 69, r.code, r.stderr)
	assert.Contains(t, r.stderr, "cannot connect to no!such!host:5432 (user u, database d): ")
	assert.Contains(t, r.stderr, "no such host")
	assert.NotContains(t, r.stderr, `\n`)
	assert.NotContains(t, r.stderr, `\t`)
	assert.NotContains(t, r.stderr, "advisory: connect:")
	assert.NotContains(t, r.stderr, "failed to connect to `user=")
	assert.NotContains(t, r.stderr, "s3cret")
	assert.Equal(t, 1, strings.Count(r.stderr, "\n"), "one line: %q", r.stderr)
}

// TestRetryMessageQuotesOnce (issue 37, item 7): the server's message quoted with %q and
// then escaped for the terminal printed too many connections for role \\"a4lim\\". It is
// quoted once, and still escaped: a control character in it is not.
func TestRetryMessageQuotesOnce(t *testing.T) {
	t.Parallel()
	s := newLateServer(t, "53300", "too many connections for role \"a4lim\"\x1b[2J", 2)
	s.up()
	r := wait(t, startEnv(t, []string{"DATABASE_URL=" + s.dsn()}, "run", "--name", t.Name(), "--", "echo", "ran"))
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, `the server says "too many connections for role "a4lim"\x1b[2J" (SQLSTATE 53300)`)
	assert.NotContains(t, r.stderr, `\"`)
	assert.NotContains(t, r.stderr, "\x1b")
}
