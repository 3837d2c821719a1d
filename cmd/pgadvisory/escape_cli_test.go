package main_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pglocal"
)

// nasty is a lock name that, printed raw, sets the terminal's title, erases the line,
// forges a table row and turns the rest of the line around.
const nasty = "\x1b]0;PWNED\a\x1b[2K\rFORGED\tROW\n\u202eevil "

// nastyEscaped is how pgadvisory prints it.
const nastyEscaped = `\x1b]0;PWNED\a\x1b[2K\rFORGED\tROW\n\u202eevil `

func TestStatusEscapesNamesAndKeepsJSONExact(t *testing.T) {
	t.Parallel()
	name := nasty + t.Name()
	_, l := holdLock(t, name, "application_name=status-escape")

	r := cli(t, "status", "--name", name)
	require.Equal(t, 0, r.code, r.stderr)
	assertTerminalSafe(t, r.stdout)
	lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
	require.Len(t, lines, 2, "a header and one row, nothing forged:\n%s", r.stdout)
	assert.Contains(t, lines[1], nastyEscaped+t.Name())
	assert.Contains(t, lines[1], strconv.Itoa(int(l.PID())))

	r = cli(t, "status", "--json", "--name", name)
	require.Equal(t, 0, r.code, r.stderr)
	assertTerminalSafe(t, r.stdout)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows), r.stdout)
	require.Len(t, rows, 1)
	assert.Equal(t, name, rows[0]["name"], "JSON keeps the name exact")

	r = cli(t, "status")
	require.Equal(t, 0, r.code, r.stderr)
	assertTerminalSafe(t, r.stdout)
}

func TestRunMessagesEscapeNames(t *testing.T) {
	t.Parallel()
	name := nasty + t.Name()
	holdLock(t, name, "application_name=run-escape")
	r := cli(t, "run", "--no-wait", "--name", name, "--", "true")
	require.Equal(t, 75, r.code, r.stderr)
	assertTerminalSafe(t, r.stderr)
	assert.Contains(t, r.stderr, `lock "`+nastyEscaped+t.Name()+`" is held by backend pid`)

	r = cli(t, "run", "--wait", "1500ms", "--name", name, "--", "true")
	require.Equal(t, 75, r.code, r.stderr)
	assertTerminalSafe(t, r.stderr)
	assert.Contains(t, r.stderr, `waiting for lock "`+nastyEscaped+t.Name()+`"`)
	assert.Contains(t, r.stderr, `gave up on lock "`+nastyEscaped+t.Name()+`"`)
}

// TestArgumentsAreEscapedInErrors: what comes from argv is untrusted too.
func TestArgumentsAreEscapedInErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{nasty},
		{"status", nasty},
		{"status", "--name", "bad\xff" + nasty},
		{"run", "--wait", nasty, "--name", "k", "--", "true"},
		{"run", "--name", "k", "--", nasty},
		{"hash", nasty, nasty},
		{"--" + nasty},
	} {
		r := noDB(t, args...)
		assert.NotEqual(t, 0, r.code)
		assert.NotEmpty(t, r.stderr)
		assertTerminalSafe(t, r.stderr)
		assertTerminalSafe(t, r.stdout)
	}
}

// hashNames are names whose SQL literal is easy to get wrong.
var hashNames = []string{
	"migrations", "it's", "a''b", `back\slash`, `trailing\`, `\x41 is not A`, `\'; SELECT 1; --`,
	"x\nSELECT pg_terminate_backend(pg_backend_pid()); --", nasty, "tab\there", "del\x7f", "nel\u0085",
	"line\u2028sep", "emoji 😀 日本", "$$dollar$$", "-- not a comment", ":var :'var' :\"var\"", "E'x'",
	"\U000e0001 tag", "esc\x1b5",
}

// TestHashPrintsALiteralThatTakesTheSameKey runs the psql line that `pgadvisory hash`
// prints against the server, with standard_conforming_strings on and off, and checks the
// lock it takes; and checks the output is safe to print and has no second SQL line.
func TestHashPrintsALiteralThatTakesTheSameKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	for _, name := range hashNames {
		r := noDB(t, "hash", "--", name)
		require.Equal(t, 0, r.code, "%q: %s", name, r.stderr)
		assertTerminalSafe(t, r.stdout)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		require.Len(t, lines, 16, "%q:\n%s", name, r.stdout) // 7 session lines, 9 of the pooled form
		key := advisory.KeyOf(name)
		assert.Equal(t, strconv.FormatInt(int64(key), 10), lines[0])
		line := lines[4]
		require.Contains(t, line, "hashtextextended(", "%q", name)
		for _, scs := range []string{"on", "off"} {
			_, err := conn.Exec(ctx, "SET standard_conforming_strings = "+scs)
			require.NoError(t, err)
			_, err = conn.Exec(ctx, line) // no arguments: the simple protocol, the text as it is
			require.NoError(t, err, "%q: %s", name, line)
			assert.Equal(t, []int64{int64(key)}, heldKeys(t, conn), "%q with standard_conforming_strings=%s: %s", name, scs, line)
			_, err = conn.Exec(ctx, "SELECT pg_advisory_unlock_all()")
			require.NoError(t, err)
		}
		if psql := findPsql(); psql != "" {
			assert.Equal(t, strconv.FormatInt(int64(key), 10), psqlKey(t, psql, line), "%q through psql: %s", name, line)
		}
	}
}

// heldKeys lists the advisory keys conn's session holds.
func heldKeys(t *testing.T, conn *pgx.Conn) []int64 {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT classid::bigint << 32 | objid::bigint FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = pg_backend_pid()`)
	require.NoError(t, err)
	keys, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	return keys
}

// psqlKey feeds line to psql, as an operator pasting it would, and returns the key the
// session then holds.
func psqlKey(t *testing.T, psql, line string) string {
	t.Helper()
	cmd := exec.Command(psql, "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-d", dsn(t))
	cmd.Stdin = strings.NewReader(line + "\n" + `SELECT classid::bigint << 32 | objid::bigint FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1 AND granted AND pid = pg_backend_pid();` + "\n")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return strings.TrimSpace(string(out))
}

func findPsql() string {
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	if len(matches) > 0 {
		return matches[len(matches)-1]
	}
	return ""
}

// skipPgWrapper puts the harness's PostgreSQL directory (pglocal.FindBinaries: on
// Debian the newest /usr/lib/postgresql/N/bin) first on PATH when psql on PATH is
// Debian's pg_wrapper, a Perl script that picks that same psql (the newest installed,
// with no cluster named) and execs it. The package's tests start psql some 50 times,
// themselves and through run, and the wrapper cost 40 ms of CPU each, four times what
// the psql it starts costs. The children inherit PATH.
func skipPgWrapper() {
	p, err := exec.LookPath("psql")
	if err != nil {
		return
	}
	if real, err := filepath.EvalSymlinks(p); err != nil || filepath.Base(real) != "pg_wrapper" {
		return
	}
	dir, err := pglocal.FindBinaries()
	if err != nil {
		return
	}
	if _, err := os.Stat(filepath.Join(dir, "psql")); err != nil {
		return
	}
	os.Setenv("PATH", dir+string(filepath.ListSeparator)+os.Getenv("PATH"))
}
