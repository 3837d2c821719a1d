package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestPgBouncerFrozenWaiter is TestHAProxyFrozenWaiter behind a real PgBouncer in
// transaction mode, where a Lock waits in slices of its transaction holding (each slice
// the lock statement under lock_timeout, in the holding's BEGIN): its backend frozen
// (SIGSTOP) mid-wait, the slice watch interrupts the statement through the connection's
// cancel handler (a CancelRequest, which PgBouncer passes to the frozen backend, then
// the fallback deadline): the Lock fails within the slice's bound, not with ctx's error,
// and its connection to PgBouncer is closed; PgBouncer drops the server connection of
// the abandoned transaction, so the backend, continued once the holder let go, never
// keeps the lock, and the key is free for the next.
func TestPgBouncerFrozenWaiter(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	t.Parallel()
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction)
	ctx := ctxT(t, 2*time.Minute)
	holder, err := advisory.New(ctx, srv.DSN())
	require.NoError(t, err)
	t.Cleanup(holder.Close)
	m, err := advisory.New(ctx, b.DSN())
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.Equal(t, advisory.HoldingTransaction, m.Holding())
	require.Positive(t, m.Bounds().HeartbeatTold, "a heartbeat behind the pooler, by default")
	frozenWait(t, m, holder, func(name string) error {
		l, err := m.Lock(ctx, name)
		if l != nil {
			l.Unlock(context.Background()) //nolint:errcheck // the wait must fail; this only cleans up
		}
		return err
	})
}
