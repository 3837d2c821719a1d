package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// txManager returns a Manager that holds its locks as transactions, on a direct
// connection.
func txManager(t testing.TB, opts ...advisory.Option) *advisory.Manager {
	t.Helper()
	m := newManager(t, nil, append([]advisory.Option{advisory.WithHolding(advisory.HoldingTransaction)}, opts...)...)
	require.Equal(t, advisory.HoldingTransaction, m.Holding())
	return m
}

// backendState returns pg_stat_activity's state of pid.
func backendState(t testing.TB, pid uint32) string {
	t.Helper()
	var state string
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT coalesce(state, '') FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&state))
	return state
}

func TestTransactionHoldingLocksAndUnlocks(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m, other := txManager(t), newManager(t, nil)
	name := t.Name()
	key := advisory.KeyOf(name)
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	requireHeldBy(t, key, l.PID())
	require.Equal(t, "idle in transaction", backendState(t, l.PID()))
	_, err = other.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked)
	require.NoError(t, l.Unlock(ctx))
	requireFree(t, key)
	require.ErrorIs(t, l.Err(), advisory.ErrNotHeld)
	requireNoAcquired(t, m)
	l2, err := other.TryLock(ctx, name)
	require.NoError(t, err)
	_, err = m.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked)
	require.NoError(t, l2.Unlock(ctx))
}

// TestTransactionHoldingCloseDropsPendingWrites: BeginFunc's writes wait in the holding's
// transaction for its Unlock; the Manager's Close ends the Lock as lost, so they must
// never commit (Close rolls the holding back instead of committing it). A Session's
// likewise.
func TestTransactionHoldingCloseDropsPendingWrites(t *testing.T) {
	t.Parallel()
	ctx, table := ctxT(t), fenceTable(t)
	m := txManager(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, table, "lock") }))
	s, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Lock(ctx, t.Name()+"/session"))
	require.NoError(t, s.BeginFunc(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, table, "session") }))
	require.Empty(t, rowsIn(t, table), "pending until the holding's Unlock")
	m.Close()
	require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	require.ErrorIs(t, s.Err(), advisory.ErrLockLost)
	require.Empty(t, rowsIn(t, table), "a holding lost to Close commits nothing")
	requireFree(t, l.Key())
}

// TestTransactionHoldingDoTxReportsAFailedCommit: on a transaction holding, DoTx's
// transaction commits at the unlock, so a COMMIT that fails (here a deferred constraint)
// is DoTx's error: it returns nil only if the transaction committed.
func TestTransactionHoldingDoTxReportsAFailedCommit(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	table := pgx.Identifier{"deferred_" + advisory.KeyOf(t.Name()).String()}.Sanitize()
	_, err := admin.Exec(ctx, "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+
		" (id int PRIMARY KEY, ref int REFERENCES "+table+" DEFERRABLE INITIALLY DEFERRED)")
	require.NoError(t, err)
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	m := txManager(t)
	err = m.DoTx(ctx, t.Name(), func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES (1, 2)") // no row 2: fails at COMMIT
		return err
	})
	require.Error(t, err, "the COMMIT failed: DoTx must not report success")
	var n int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+table).Scan(&n))
	require.Zero(t, n)
	requireFree(t, advisory.KeyOf(t.Name()))
	requireNoAcquired(t, m)
}

// TestTransactionHoldingCancelledTokenTakesNone: a transaction holding takes its token
// on another connection of the pool; a Token whose ctx ends as that statement finishes
// returns the token it took, or takes none and keeps the lock, as on a session holding:
// an error never leaves the key's counter moved.
func TestTransactionHoldingCancelledTokenTakesNone(t *testing.T) {
	t.Parallel()
	dsn(t) // skips without a server, before the cleanup that needs one
	table := "fence_tokens_" + advisory.KeyOf(t.Name()).String()
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()) })
	m := txManager(t, advisory.WithFenceTable(table))
	ctx := ctxT(t)
	require.NoError(t, m.CreateFenceTable(ctx))
	var newest int64
	for i := range 300 {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		tctx, cancel := context.WithCancel(ctx)
		time.AfterFunc(time.Duration(i%40)*50*time.Microsecond, cancel)
		tok, err := l.Token(tctx)
		cancel()
		var now int64
		require.NoError(t, admin.QueryRow(ctx, "SELECT coalesce(max(token), 0) FROM "+pgx.Identifier{table}.Sanitize()).Scan(&now))
		if err != nil {
			require.ErrorIs(t, err, context.Canceled)
			require.NoError(t, l.Err(), "round %d: a failed Token keeps the lock", i)
			require.Equal(t, newest, now, "round %d: Token returned %v, but the key's token went from %d to %d", i, err, newest, now)
		} else {
			require.Equal(t, now, tok, "round %d", i)
		}
		newest = now
		require.NoError(t, l.Unlock(ctx))
	}
}
