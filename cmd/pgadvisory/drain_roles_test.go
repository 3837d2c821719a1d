package main_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// forgeTag connects as a LOGIN-only role of its own to template1 with an
// application_name that carries a forged work tag of the lock name (the database's oid
// from pg_database, the key from pgadvisory hash) and stays idle; it returns the
// session's pid and its role.
func forgeTag(t *testing.T, name string) (uint32, string) {
	t.Helper()
	var oid uint32
	require.NoError(t, adminQuery(t, "SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&oid))
	tag := "pgadv/" + strconv.FormatUint(uint64(oid), 36) + "/" +
		strconv.FormatUint(uint64(advisory.KeyOf(name)), 36) + `/1.aaaaaa "quoted\`
	role, roleDSN := tempRole(t, "forger")
	c, err := pgx.Connect(context.Background(), pgtest.WithPairs(roleDSN, "dbname=template1", "application_name="+tag))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c.PgConn().PID(), role
}

// TestRunIgnoresAForgedTag (issue 37, item 1): run as a LOGIN-only role without
// pg_signal_backend meets a session of another LOGIN-only role whose application_name
// carries a forged tag of its lock: it starts its command, exits 0, says which session
// it ignored and why, and leaves the session alone.
func TestRunIgnoresAForgedTag(t *testing.T) {
	t.Parallel()
	holder, holderDSN := tempRole(t, "holder")
	forged, forger := forgeTag(t, t.Name())
	started := t.TempDir() + "/started"
	r := wait(t, startEnv(t, []string{"DATABASE_URL=" + holderDSN}, "run", "--quiet", "--drain-wait", "0",
		"--name", t.Name(), "--", "touch", started))
	require.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, started)
	assert.True(t, backendAlive(t, forged), "the forger's session was left alone")
	assert.Empty(t, holders(t, advisory.KeyOf(t.Name())))
	assert.Contains(t, r.stderr, fmt.Sprintf(`ignored a session that carries the lock's work tag: backend pid %d `+
		`("pgadv/`, forged), "reported even with --quiet")
	assert.Contains(t, r.stderr, fmt.Sprintf(`"quoted\\", role "%s"): its role is not one run drains `+
		`(run's own role "%s", one whose privileges it has, or a --work-role)`, forger, holder), "escaped")
	assert.NotContains(t, r.stderr, "GRANT")
	assertTerminalSafe(t, r.stderr)
	assert.NotContains(t, r.stderr, breakPassword)
}
