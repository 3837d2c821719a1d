package advmigrate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestRetryAfterALoss: the lock's session is terminated while migration 2 runs, and Up
// returns the loss. A second Up on the same Migrate then takes the lock again, applies
// migration 3 and ends clean, on the driver's own session, which the wrapper's drain left
// alone: golang-migrate keeps its own "locked" flag when the driver's Unlock fails, and a
// session still tagged from the lost holding would be drained (terminated) by the next
// Lock of the same driver.
func TestRetryAfterALoss(t *testing.T) {
	t.Parallel()
	dsn := freshDB(t, 2*time.Second)
	conn := connect(t, dsn)
	mg, _ := newMigrate(t, dsn, newManager(t, dsn), t.Name())
	errc := make(chan error, 1)
	go func() { errc <- mg.Up() }()
	var driverPID uint32
	eventually(t, 30*time.Second, func() bool { driverPID, _ = sleeper(t, conn); return driverPID != 0 }, "migration 2 runs")
	terminateHolder(t, conn, t.Name())
	require.ErrorIs(t, <-errc, advisory.ErrLockLost, "the first Up")

	_, err := conn.Exec(ctxT(t), "UPDATE migration_sleep SET seconds = 0")
	require.NoError(t, err)
	require.NoError(t, mg.Up(), "a retry of Up on the same Migrate")
	applied, version, dirty := state(t, conn)
	assert.Equal(t, []int{1, 2, 3}, applied, "migration 3 ran on the retry, each migration once")
	assert.Equal(t, 3, version)
	assert.False(t, dirty)
	var alive bool
	require.NoError(t, conn.QueryRow(ctxT(t), "SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", driverPID).Scan(&alive))
	assert.True(t, alive, "the driver's session (pid %d) was not drained by its own retry", driverPID)
}
