package main_test

import (
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// needPsql skips a test whose command is psql where psql is not installed.
func needPsql(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("psql is not installed: the command under test is psql")
	}
}

// workIdentityScript prints the work identity run gives its command, then what the server
// shows of psql's session: its application_name, client_connection_check_interval (on
// PostgreSQL 14+, else "none") and work_mem.
const workIdentityScript = `printf '%s\n' "$PGAPPNAME" "$PGOPTIONS" "$PGADVISORY_APPNAME"
psql -X -A -t -q -d "$1" \
  -c "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()" \
  -c "SELECT coalesce((SELECT setting FROM pg_settings WHERE name = 'client_connection_check_interval'), 'none')" \
  -c "SHOW work_mem"`

// workTag is the form of a holding's tag: pgadv/DB/KEY/PID.NONCE in base 36.
var workTag = regexp.MustCompile(`^pgadv/[0-9a-z]+/p?[0-9a-z]+/[0-9a-z]+\.[0-9a-z]{6}$`)

// pooledWorkTag is a work tag with the pooled mark: work that may reach its server
// through a transaction pooler (see docs/work.md).
var pooledWorkTag = regexp.MustCompile(`^pgadv/[0-9a-z]+/p?[0-9a-z]+/[0-9a-z]+\.[0-9a-z]{6}\.t$`)

// TestRunGivesTheCommandItsWorkIdentity: the command gets PGAPPNAME (the holding's tag,
// then the user's PGAPPNAME), PGOPTIONS (our settings, then the user's) and
// PGADVISORY_APPNAME (the tag), and psql started under run shows up in
// pg_stat_activity with the tag and with client_connection_check_interval set.
func TestRunGivesTheCommandItsWorkIdentity(t *testing.T) {
	t.Parallel()
	needPsql(t)
	for _, tc := range []struct{ app, opts string }{
		{"user-app", "-c work_mem=7MB"},
		{"", ""},
	} {
		env := []string{"DATABASE_URL=" + dsn(t), "PGAPPNAME=" + tc.app, "PGOPTIONS=" + tc.opts}
		r := wait(t, startEnv(t, env, "run", "--name", t.Name(), "--", "sh", "-c", workIdentityScript, "sh", dsn(t)))
		require.Equal(t, 0, r.code, r.stderr)
		if tc.app != "" {
			assert.Equal(t, "pgadvisory: acquired lock \""+t.Name()+"\" without waiting\n", r.stderr,
				"the first holder of the key has nothing to drain, and says only that it took the lock")
		}
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		require.Len(t, lines, 6, r.stdout)
		appName, options, tag, seenApp, interval, workMem := lines[0], lines[1], lines[2], lines[3], lines[4], lines[5]

		assert.Regexp(t, workTag, tag, "PGADVISORY_APPNAME is the tag")
		want := tag
		if tc.app != "" {
			want += " " + tc.app
		}
		assert.Equal(t, want, appName, "PGAPPNAME: the tag, then the user's")
		assert.Equal(t, want, seenApp, "psql's session carries it")
		assert.True(t, strings.HasPrefix(options, "-c "), "PGOPTIONS: %q", options)
		assert.True(t, strings.HasSuffix(options, tc.opts), "the user's PGOPTIONS come last: %q", options)
		if tc.opts != "" {
			assert.Equal(t, "7MB", workMem, "the user's PGOPTIONS still apply")
		}
		if interval != "none" {
			assert.Contains(t, options, "client_connection_check_interval=")
			ms, err := strconv.Atoi(interval)
			require.NoError(t, err, interval)
			assert.Positive(t, ms, "client_connection_check_interval is set in psql's session")
		}
	}
}
