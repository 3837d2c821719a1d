package advmigrate_test

import (
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/source/file"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	advmigrate "github.com/pgadvisory/advisory/contrib/migrate"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestSIGKILLedHolderThroughAPooler is TestSIGKILLedHolder through a real PgBouncer in
// transaction mode (issue 36): five replicas, the lock held by transaction, golang-migrate's
// own connections through the pooler too (the driver from advmigrate.Open, as Wrap refuses
// golang-migrate's constructor there; pgx in QueryExecModeExec). The wrapper tags no session there: each migration carries the holding's
// tag for its own transaction (a session setting would reach the pooler's other clients),
// so the SIGKILLed holder's migration 2, still sleeping on its server session after
// PgBouncer closed it, is found by the next holder's drain and rolled back before
// anything else runs. Every migration is applied once, the database ends clean.
func TestSIGKILLedHolderThroughAPooler(t *testing.T) {
	t.Parallel()
	direct := freshDB(t, time.Minute)
	conn := connect(t, direct)
	cfg, err := pgconn.ParseConfig(direct)
	require.NoError(t, err)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(12))
	dsn := pgtest.WithParams(b.DSN(), map[string]string{"dbname": cfg.Database, "default_query_exec_mode": "exec"})
	pid, app := killHolder(t, conn, dsn)
	start := time.Now()
	src, err := (&file.File{}).Open("file://testdata/migrations")
	require.NoError(t, err)
	t.Cleanup(func() { src.Close() })
	upConcurrently(t, dsn, 4, advmigrate.WithRecoverDirty(src))
	took := time.Since(start)
	assert.Less(t, took, 20*time.Second, "the dead migration's 60 s sleep did not hold the next one up")
	var gone bool
	require.NoError(t, conn.QueryRow(ctxT(t), "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&gone))
	assert.True(t, gone, "the dead holder's migration session (pid %d) is gone", pid)
	applied, version, dirty := state(t, conn)
	assert.Equal(t, []int{1, 2, 3}, applied, "each migration once: the killed migration 2 was rolled back")
	assert.Equal(t, 3, version)
	assert.False(t, dirty)
	t.Logf("through the pooler: migrated in %v after the kill (dead session pid %d, %q)", took.Round(time.Millisecond), pid, app)
}
