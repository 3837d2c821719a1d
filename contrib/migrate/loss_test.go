package advmigrate_test

import (
	"context"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advmigrate "github.com/pgadvisory/advisory/contrib/migrate"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestLossStopsFurtherMigrations: the lock's session is terminated while migration 2
// runs. Migration 2 runs to its end and is recorded; the wrapper refuses to mark
// migration 3 as started, and Up returns the loss.
func TestLossStopsFurtherMigrations(t *testing.T) {
	t.Parallel()
	dsn := freshDB(t, 2*time.Second)
	conn := connect(t, dsn)
	mg, _ := newMigrate(t, dsn, newManager(t, dsn), t.Name())
	errc := make(chan error, 1)
	go func() { errc <- mg.Up() }()
	eventually(t, 30*time.Second, func() bool { pid, _ := sleeper(t, conn); return pid != 0 }, "migration 2 runs")
	terminateHolder(t, conn, t.Name())

	err := <-errc
	require.ErrorIs(t, err, advisory.ErrLockLost)
	assert.Contains(t, err.Error(), "set the version refused", "the wrapper stopped migration 3")
	applied, version, dirty := state(t, conn)
	assert.Equal(t, []int{1, 2}, applied, "migration 2 ran to its end, migration 3 never started")
	assert.Equal(t, 2, version)
	assert.False(t, dirty)
}

// terminateHolder terminates the session holding the advisory lock name.
func terminateHolder(t testing.TB, conn *pgx.Conn, name string) {
	t.Helper()
	pids, err := pgtest.Holders(ctxT(t), srv.DSN(), int64(advisory.KeyOf(name)))
	require.NoError(t, err)
	require.Len(t, pids, 1, "holders of %q", name)
	var ok bool
	require.NoError(t, conn.QueryRow(ctxT(t), "SELECT pg_terminate_backend($1)", int32(pids[0])).Scan(&ok))
	require.True(t, ok)
}

// TestWrappedInstancesExcludeEachOtherNotTheDriversLock: the wrapper never takes the
// driver's own lock (an outside session holding that key does not hold a wrapped Up up:
// the mixed case of docs/migrations.md), and two wrapped drivers exclude each other
// through the Manager's lock.
func TestWrappedInstancesExcludeEachOtherNotTheDriversLock(t *testing.T) {
	t.Parallel()
	dsn := freshDB(t, 0)
	conn := connect(t, dsn)
	mg, d1 := newMigrate(t, dsn, newManager(t, dsn), t.Name())
	_, d2 := newMigrate(t, dsn, newManager(t, dsn), t.Name(), advmigrate.WithWait(300*time.Millisecond))

	var db string
	require.NoError(t, conn.QueryRow(ctxT(t), "SELECT current_database()").Scan(&db))
	key, err := database.GenerateAdvisoryLockId(db, "public", "schema_migrations") // as the pgx/v5 driver does
	require.NoError(t, err)
	_, err = conn.Exec(ctxT(t), "SELECT pg_advisory_lock($1::bigint)", key)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- mg.Up() }()
	select {
	case err := <-done:
		require.NoError(t, err, "a wrapped Up while another session holds the driver's own lock")
	case <-time.After(30 * time.Second):
		t.Fatal("the wrapped Up waits for the driver's own lock")
	}

	require.NoError(t, d1.Lock())
	require.ErrorIs(t, d1.Lock(), database.ErrLocked)
	require.ErrorIs(t, d2.Lock(), context.DeadlineExceeded, "d2 waits 300 ms while d1 holds")
	require.NoError(t, d1.Unlock())
	require.ErrorIs(t, d1.Unlock(), database.ErrNotLocked)
	require.NoError(t, d2.Lock())
	require.NoError(t, d2.Unlock())
}

// TestInvalidOptions: a wait that is not positive, a nil source to recover from.
func TestInvalidOptions(t *testing.T) {
	t.Parallel()
	dsn := freshDB(t, 0)
	m := newManager(t, dsn)
	for _, w := range []time.Duration{0, -time.Second} {
		_, _, err := openMigrate(dsn, m, t.Name(), advmigrate.WithWait(w))
		assert.ErrorIs(t, err, advisory.ErrInvalidOption, "WithWait(%v)", w)
	}
	_, _, err := openMigrate(dsn, m, t.Name(), advmigrate.WithRecoverDirty(nil))
	assert.ErrorIs(t, err, advisory.ErrInvalidOption, "WithRecoverDirty(nil)")
}
