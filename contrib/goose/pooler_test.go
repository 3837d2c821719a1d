package advgoose_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestFiveProvidersOneSIGKILLedThroughAPooler is TestFiveProvidersOneSIGKILLed through a
// real PgBouncer in transaction mode (issue 36): every Manager holds the lock as a
// transaction, and goose's connections go through the pooler too (pgx in
// QueryExecModeExec, as a transaction pooler needs). The victim is SIGKILLed while its
// migration 2 sleeps (8 s) in a transaction nobody will commit; the four survivors apply
// migrations 2 and 3 exactly once in all, and the victim's migration 2 never commits. With
// no tag on goose's connection there (see the package doc), the taker's migration 2
// waits for the dead transaction's table lock until its backend ends.
func TestFiveProvidersOneSIGKILLedThroughAPooler(t *testing.T) {
	direct, admin := database(t)
	cfg, err := pgconn.ParseConfig(direct)
	require.NoError(t, err)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(12))
	dsn := pgtest.WithParams(b.DSN(), map[string]string{"dbname": cfg.Database, "default_query_exec_mode": "exec"})
	deadPID, took := fiveProviders(t, dsn, admin, []string{envVictimPooled + "=1"}, func() *advisory.Manager {
		m := newManager(t, dsn)
		require.Equal(t, advisory.HoldingTransaction, m.Holding())
		return m
	}, func() int32 { return sleepingPooledBackend(t, admin) })
	waitFor(t, "the dead backend gone", func() bool {
		return count(t, admin, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", deadPID) == 0
	})
	t.Logf("through the pooler, the survivors were done %v after the SIGKILL (the dead migration slept 8 s)", took)
}

// sleepingPooledBackend waits until the victim's migration 2 sleeps (through the pooler
// its backend shows the victim's application_name, untagged), and returns its pid.
func sleepingPooledBackend(t *testing.T, admin *pgxpool.Pool) int32 {
	t.Helper()
	var pid int32
	waitFor(t, "the victim's migration 2 sleeping", func() bool {
		err := admin.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE application_name = 'victim sleep=8' AND state = 'active' AND query LIKE '%pg_sleep%'`).Scan(&pid)
		return err == nil
	})
	return pid
}
