package advisorytest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/advisorytest"
)

// TestExample runs the package's Example test against the shared server.
func TestExample(t *testing.T) {
	t.Parallel()
	testMigrationLockIsExclusive(t)
}

func query[T any](t *testing.T, dsn, sql string, args ...any) T {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	require.NoError(t, err)
	defer conn.Close(context.Background())
	var v T
	require.NoError(t, conn.QueryRow(context.Background(), sql, args...).Scan(&v))
	return v
}

// TestEachCallHasItsOwnDatabase: two DSN calls are two databases, whose advisory locks
// are independent, and each is dropped when its test ends, even with a session (and a
// lock) still open on it.
func TestEachCallHasItsOwnDatabase(t *testing.T) {
	t.Parallel()
	mine := advisorytest.DSN(t)
	var inner string
	t.Run("leaky", func(t *testing.T) {
		inner = advisorytest.DSN(t)
		m, err := advisory.New(t.Context(), inner)
		require.NoError(t, err)
		_, err = m.Lock(t.Context(), "same-name")
		require.NoError(t, err)
		// m is never closed: the cleanup must terminate its sessions to drop the database.
		other, err := advisory.New(t.Context(), mine)
		require.NoError(t, err)
		defer other.Close()
		l, err := other.TryLock(t.Context(), "same-name")
		require.NoError(t, err, "the same key in another database is another lock")
		require.NoError(t, l.Unlock(t.Context()))
	})
	cfg, err := pgx.ParseConfig(inner)
	require.NoError(t, err)
	assert.NotEqual(t, cfg.Database, query[string](t, mine, "SELECT current_database()"))
	assert.Regexp(t, `^advisorytest_[0-9a-f]{16}$`, cfg.Database)
	n := query[int](t, mine, "SELECT count(*)::int FROM pg_database WHERE datname = $1", cfg.Database)
	assert.Zero(t, n, "database %s still exists after its test ended", cfg.Database)
	_, err = pgx.Connect(t.Context(), inner)
	assert.Error(t, err)
}

// TestParallelTestsDoNotShareLocks: parallel tests take the same name exclusively at once,
// each in its database, and each sees only its own lock in pg_locks.
func TestParallelTestsDoNotShareLocks(t *testing.T) {
	for i := range 6 {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			dsn := advisorytest.DSN(t)
			m, err := advisory.New(t.Context(), dsn)
			require.NoError(t, err)
			defer m.Close()
			l, err := m.TryLock(t.Context(), "shared-name")
			require.NoError(t, err)
			hs, err := m.AllHolders(t.Context())
			require.NoError(t, err)
			require.Len(t, hs, 1)
			assert.Equal(t, l.PID(), hs[0].PID)
		})
	}
}
