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
// keeps the lock, and the key is free for the next. A Session's Lock (a savepoint of its
// transaction) likewise, which ends the Session and frees the lock it held.
func TestPgBouncerFrozenWaiter(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	t.Parallel()
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction)
	ctx := ctxT(t, 2*time.Minute)
	holder, err := advisory.New(ctx, srv.DSN())
	require.NoError(t, err)
	t.Cleanup(holder.Close)
	t.Run("Lock", func(t *testing.T) {
		t.Parallel()
		m := pooledManager(t, ctx, b)
		frozenWait(t, m, holder, func(name string) error {
			l, err := m.Lock(ctx, name)
			if l != nil {
				l.Unlock(context.Background()) //nolint:errcheck // the wait must fail; this only cleans up
			}
			return err
		})
	})
	t.Run("Session", func(t *testing.T) { // its wait ends the Session, and the lock it held
		t.Parallel()
		m := pooledManager(t, ctx, b)
		S, err := m.Session(ctx)
		require.NoError(t, err)
		require.NoError(t, S.Lock(ctx, t.Name()+"/first"))
		frozenWait(t, m, holder, func(name string) error { return S.Lock(ctx, name) })
		<-S.Done()
		require.ErrorIs(t, S.Err(), advisory.ErrLockLost)
		next, err := holder.Lock(ctx, t.Name()+"/first")
		require.NoError(t, err, "the Session's first lock is free")
		require.NoError(t, next.Unlock(ctx))
	})
}

// pooledManager returns a Manager with default options through b, which holds by
// transaction with a heartbeat, closed when t ends.
func pooledManager(t *testing.T, ctx context.Context, b *pgtest.PgBouncer) *advisory.Manager {
	t.Helper()
	m, err := advisory.New(ctx, b.DSN())
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.Equal(t, advisory.HoldingTransaction, m.Holding())
	require.Positive(t, m.Bounds().HeartbeatTold, "a heartbeat behind the pooler, by default")
	return m
}
