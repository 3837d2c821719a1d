package advisory_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestPoolerTimeoutToldWhileFnHoldsTheConnection: fenced work pauses between two
// statements longer than PgBouncer's idle_transaction_timeout. The pooler ends the
// holding's transaction; the holder is told while fn still pauses (not when fn next
// speaks), and the loss names the pooler's setting, not a termination (issue 43, item 4).
func TestPoolerTimeoutToldWhileFnHoldsTheConnection(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithIdleTransactionTimeout(1))
	m := pooledManager(t, b)
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	resume := make(chan struct{})
	var toldWhilePaused bool
	err = l.BeginFunc(ctx, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
			return err
		}
		select { // the pause: until the holder is told, or far past the pooler's timeout
		case <-l.Done():
			toldWhilePaused = true
		case <-time.After(20 * time.Second):
		}
		close(resume)
		_, err := tx.Exec(ctx, "SELECT 2")
		return err
	})
	<-resume
	require.True(t, toldWhilePaused, "the holder was not told while fn paused")
	require.ErrorIs(t, err, advisory.ErrLockLost)
	require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	require.Contains(t, l.Err().Error(), "idle_transaction_timeout", "the loss names the pooler's setting")
	require.NotContains(t, l.Err().Error(), "pg_terminate_backend")
	// The pooler closed the holding's server connection; its backend frees the lock as it
	// exits, which may come after the holder was told (the safe order).
	eventually(t, 10*time.Second, func() bool { return len(lockRows(t, l.Key())) == 0 },
		"the lock of key %d was never freed", l.Key())
}
