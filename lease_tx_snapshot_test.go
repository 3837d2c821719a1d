package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// An idle transaction holding holds no snapshot and no transaction id (issue 43, item 6):
// CREATE INDEX CONCURRENTLY waits for every transaction whose snapshot could see the
// table's old rows ("waiting for old snapshots"), and vacuum keeps what any xmin may
// still see. A holding idle between two calls must therefore show backend_xmin and
// backend_xid NULL in pg_stat_activity after every call the library makes on its
// transaction: a drain, a token, an announcement, a heartbeat, a BeginFunc that wrote
// nothing.

// requireNoSnapshot fails unless pid's backend holds no snapshot and no transaction id.
func requireNoSnapshot(t testing.TB, pid uint32, after string) {
	t.Helper()
	var xmin, xid *string
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT backend_xmin::text, backend_xid::text FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&xmin, &xid))
	require.Nil(t, xmin, "after %s the idle holding (backend %d) keeps a snapshot (backend_xmin)", after, pid)
	require.Nil(t, xid, "after %s the idle holding (backend %d) keeps a transaction id (backend_xid)", after, pid)
}

func TestTransactionHoldingKeepsNoSnapshot(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := txManager(t, advisory.WithLeaderTable("advisory_leaders_snapshot"))
	require.NoError(t, m.CreateFenceTable(ctx))
	require.NoError(t, m.CreateLeaderTable(ctx))
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	requireNoSnapshot(t, l.PID(), "the lock statement")

	_, err = l.Drain(ctx)
	require.NoError(t, err)
	requireNoSnapshot(t, l.PID(), "Drain")

	_, err = l.Token(ctx)
	require.NoError(t, err)
	requireNoSnapshot(t, l.PID(), "Token")

	require.NoError(t, l.Publish(ctx, "v"))
	requireNoSnapshot(t, l.PID(), "Publish")

	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
		var n int
		return tx.QueryRow(ctx, "SELECT count(*) FROM pg_catalog.pg_class WHERE relname = $1", "x").Scan(&n)
	}))
	requireNoSnapshot(t, l.PID(), "a BeginFunc that only read")
}

// TestTransactionHoldingHeartbeatKeepsNoSnapshot: a beat leaves no snapshot either.
func TestTransactionHoldingHeartbeatKeepsNoSnapshot(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := txManager(t, advisory.WithHeartbeat(100*time.Millisecond))
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Unlock(context.Background()) })
	_, err = l.Drain(ctx) // the drain's statements, then beats after them
	require.NoError(t, err)
	start := backendStateChange(t, l.PID())
	require.Eventually(t, func() bool { return backendStateChange(t, l.PID()).After(start) }, 10*time.Second,
		10*time.Millisecond, "no heartbeat ran")
	requireNoSnapshot(t, l.PID(), "a heartbeat")
}

// backendStateChange returns pg_stat_activity's state_change of pid.
func backendStateChange(t testing.TB, pid uint32) time.Time {
	t.Helper()
	var at time.Time
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT state_change FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&at))
	return at
}
