package main_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

func TestStatusJSONListsAHeldLock(t *testing.T) {
	t.Parallel()
	_, l := holdLock(t, t.Name(), "application_name=status-holder")
	r := cli(t, "status", "--json", "--name", t.Name())
	require.Equal(t, 0, r.code, r.stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows), r.stdout)
	require.Len(t, rows, 1)
	row := rows[0]
	assert.Equal(t, strconv.FormatInt(int64(l.Key()), 10), row["key"], "key is a string: int64 survives JSON")
	assert.Equal(t, t.Name(), row["name"])
	assert.Equal(t, "exclusive", row["mode"])
	assert.Equal(t, "holding", row["state"])
	assert.EqualValues(t, l.PID(), row["pid"])
	assert.Equal(t, "status-holder", row["application_name"])
	assert.Contains(t, row["client"], "127.0.0.1:")
	for _, field := range []string{"pair", "backend_start", "since"} {
		assert.Contains(t, row, field)
	}

	all := cli(t, "status", "--json")
	require.Equal(t, 0, all.code)
	assert.Contains(t, all.stdout, strconv.FormatInt(int64(l.Key()), 10))
}

func TestStatusTable(t *testing.T) {
	t.Parallel()
	_, l := holdLock(t, t.Name(), "application_name=table-holder")
	r := cli(t, "status", "--name", t.Name())
	require.Equal(t, 0, r.code, r.stderr)
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	require.Len(t, lines, 2, r.stdout)
	assert.Regexp(t, `^KEY\s+NAME\s+MODE\s+STATE\s+PID\s+APPLICATION\s+CLIENT\s+FOR`, lines[0])
	for _, want := range []string{t.Name(), "exclusive", "holding", strconv.Itoa(int(l.PID())), "table-holder"} {
		assert.Contains(t, lines[1], want)
	}
	require.NoError(t, l.Unlock(t.Context()))
	r = cli(t, "status", "--name", t.Name())
	assert.Contains(t, r.stdout, fmt.Sprintf(`no advisory lock with key %d (name "%s") is held or awaited`,
		l.Key(), t.Name()))
}

func TestStatusConnectionFromPGVariables(t *testing.T) {
	t.Parallel()
	dsn(t)
	if srv.Kind() != "local" {
		t.Skip("PG* variables are checked against the local harness server")
	}
	p := startEnv(t, []string{"DATABASE_URL=", "PGHOST=127.0.0.1", "PGPORT=" + strconv.Itoa(srv.Port()),
		"PGUSER=postgres", "PGDATABASE=postgres", "PGSSLMODE=disable"}, "status")
	r := wait(t, p)
	assert.Equal(t, 0, r.code, r.stderr)
}

func TestHash(t *testing.T) {
	t.Parallel()
	r := cli(t, "hash", "migrations")
	require.Equal(t, 0, r.code)
	assert.True(t, strings.HasPrefix(r.stdout, "4637455633556087398\n"), r.stdout)
	assert.Contains(t, r.stdout, "SELECT pg_advisory_lock(4637455633556087398);")
	assert.Contains(t, r.stdout, "SELECT pg_advisory_lock(hashtextextended('migrations', 0));")
	r = cli(t, "hash", "it's")
	assert.Contains(t, r.stdout, "hashtextextended('it''s', 0)", "SQL-quoted")
	assert.Contains(t, r.stdout, strconv.FormatInt(int64(advisory.KeyOf("it's")), 10))
	assert.Equal(t, 64, cli(t, "hash").code)
	assert.Equal(t, 64, cli(t, "hash", "").code)
}

// TestStatusSaysWhenTheClientIsHidden: a role that may not see another role's session
// is told its client is hidden, never "local" (which means a Unix socket on the database
// host): in the table, in --json and in run's report of who holds the lock.
func TestStatusSaysWhenTheClientIsHidden(t *testing.T) {
	name := t.Name()
	holdLock(t, name, "") // the superuser, over TCP
	_, roleDSN := tempRole(t, "hidden")
	r := cli(t, "status", "--dsn", roleDSN, "--name", name)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "(hidden)")
	assert.NotContains(t, r.stdout, " local ")
	r = cli(t, "status", "--dsn", roleDSN, "--name", name, "--json")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, `"client_hidden": true`)
	r = cli(t, "run", "--dsn", roleDSN, "--name", name, "--no-wait", "--", "true")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, "client not visible to this role")
	assert.NotContains(t, r.stderr, "local socket")
}
