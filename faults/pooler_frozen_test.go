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
	frozenWaiters(t, ctx, func(t *testing.T) *advisory.Manager { return pooledManager(t, ctx, b) })
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
