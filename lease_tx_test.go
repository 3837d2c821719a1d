package advisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// Transaction holdings on a direct connection (WithHolding(HoldingTransaction)): the
// lease that a transaction pooler needs, proven where the server can be watched without
// a pooler in between. pooler_real_tx_test.go runs them through PgBouncer.

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
	require.Equal(t, advisory.HoldingSession, other.Holding())
	require.False(t, m.Bounds().TransactionPooler, "held by transaction, but on a direct connection")
	name := t.Name()
	key := advisory.KeyOf(name)
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	requireHeldBy(t, key, l.PID())
	require.Equal(t, "idle in transaction", backendState(t, l.PID()))
	_, err = other.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked, "a session holding and a transaction holding exclude each other")
	hs, err := other.Holders(ctx, name)
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, name, hs[0].Name, "Holders names a transaction holding from its statement's comment")
	require.NoError(t, l.Unlock(ctx))
	requireFree(t, key)
	require.ErrorIs(t, l.Err(), advisory.ErrNotHeld)
	require.ErrorIs(t, l.Unlock(ctx), advisory.ErrNotHeld)
	requireNoAcquired(t, m)
	l2, err := other.TryLock(ctx, name)
	require.NoError(t, err)
	_, err = m.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked)
	requireNoAcquired(t, m)
	require.NoError(t, l2.Unlock(ctx))
	for _, shared := range []func(context.Context, string) (*advisory.Lock, error){m.LockShared, m.TryLockShared} {
		a, err := shared(ctx, name)
		require.NoError(t, err)
		b, err := other.TryLockShared(ctx, name)
		require.NoError(t, err, "shared transaction and session holdings coexist")
		_, err = other.TryLock(ctx, name)
		require.ErrorIs(t, err, advisory.ErrLocked)
		require.NoError(t, a.Unlock(ctx))
		require.NoError(t, b.Unlock(ctx))
	}
	p, err := m.LockPair(ctx, advisory.Pair{Class: 7, Object: -9})
	require.NoError(t, err)
	_, err = other.TryLockPair(ctx, advisory.Pair{Class: 7, Object: -9})
	require.ErrorIs(t, err, advisory.ErrLocked)
	require.NoError(t, p.Unlock(ctx))
}

// TestTransactionHoldingCancelRacingTheGrant is TestCancelRacingTheGrantNeverLeavesTheLockHeld
// for a transaction holding: the waiter's cancel and the holder's COMMIT race.
func TestTransactionHoldingCancelRacingTheGrant(t *testing.T) {
	t.Parallel()
	cancelRacingTheGrant(t, txManager(t), txManager(t), inShort(150, 60)) // -short: as the pooled variants
}

// TestTransactionHoldingTerminationIsTold: pg_terminate_backend of the holding's backend
// closes Done at once, with a loss, and the key is free soon after.
func TestTransactionHoldingTerminationIsTold(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := txManager(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	terminate(t, l.PID()) // at once: the poller watches a holding from its grant
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("a terminated transaction holding was not told within 2s")
	}
	require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	eventually(t, 5*time.Second, func() bool { return len(lockRows(t, l.Key())) == 0 }, "the key freed")
	require.ErrorIs(t, l.Unlock(ctx), advisory.ErrLockLost)
	requireNoAcquired(t, m)
}

// TestTransactionHoldingBeginFunc: fn runs in a savepoint of the holding's transaction;
// its writes are invisible to others until Unlock commits them, a failed fn's writes are
// rolled back and the lock kept, a loss before Unlock takes the writes with it, and
// transaction options are refused.
func TestTransactionHoldingBeginFunc(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	table := createRowsTable(t)
	m := txManager(t)
	insert := func(v string) func(pgx.Tx) error {
		return func(tx pgx.Tx) error { _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", v); return err }
	}
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	require.NoError(t, l.BeginFunc(ctx, insert("kept")))
	errFn := errors.New("fn failed")
	require.ErrorIs(t, l.BeginFunc(ctx, func(tx pgx.Tx) error { insert("undone")(tx); return errFn }), errFn)
	err = l.BeginTxFunc(ctx, pgx.TxOptions{IsoLevel: pgx.Serializable}, insert("never"))
	require.ErrorIs(t, err, advisory.ErrTransactionHolding)
	assert.Empty(t, rowsOf(t, table), "BeginFunc's writes wait for the holding's COMMIT")
	require.NoError(t, l.Err())
	require.NoError(t, l.Unlock(ctx))
	assert.Equal(t, []string{"kept"}, rowsOf(t, table), "Unlock committed fn's writes, and only the successful fn's")

	l, err = m.Lock(ctx, t.Name())
	require.NoError(t, err)
	require.NoError(t, l.BeginFunc(ctx, insert("lost")))
	time.Sleep(5 * time.Millisecond)
	terminate(t, l.PID())
	<-l.Done()
	require.ErrorIs(t, l.Unlock(ctx), advisory.ErrLockLost)
	assert.Equal(t, []string{"kept"}, rowsOf(t, table), "a lost holding's writes never commit")
	requireNoAcquired(t, m)
}

// TestTransactionHoldingDoTxFencesAStaleHolder: holder A's DoTx writes, then A is cut
// off (its backend terminated, as a partition or a pause past the server's release would
// end it) while fn goes on; B takes the lock and writes. A's later write and its COMMIT
// fail: only B's rows are committed, and A's DoTx reports the loss.
func TestTransactionHoldingDoTxFencesAStaleHolder(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	table := createRowsTable(t)
	a, b := txManager(t), txManager(t)
	name := t.Name()
	var aPID uint32
	aWrote, bDone := make(chan struct{}), make(chan struct{})
	aErr := make(chan error, 1)
	go func() {
		aErr <- a.DoTx(ctx, name, func(ctx context.Context, tx pgx.Tx) error {
			aPID = advisory.LockFromContext(ctx).PID()
			if _, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ('a1')"); err != nil {
				return err
			}
			close(aWrote)
			<-bDone // a stale holder goes on as if it still held the lock
			_, err := tx.Exec(context.WithoutCancel(ctx), "INSERT INTO "+table+" VALUES ('a2')")
			return err
		})
	}()
	<-aWrote
	terminate(t, aPID)
	require.NoError(t, b.DoTx(ctx, name, func(ctx context.Context, tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ('b')")
		return err
	}))
	close(bDone)
	require.ErrorIs(t, <-aErr, advisory.ErrLockLost)
	assert.Equal(t, []string{"b"}, rowsOf(t, table), "the stale holder's writes were refused by the database")
}

// createRowsTable creates a one-column table for the test's writes.
func createRowsTable(t testing.TB) string {
	t.Helper()
	table := pgx.Identifier{"rows_" + t.Name()}.Sanitize()
	_, err := admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (v text)")
	require.NoError(t, err)
	return table
}

// rowsOf returns the table's values, sorted.
func rowsOf(t testing.TB, table string) []string {
	t.Helper()
	rows, err := admin.Query(context.Background(), "SELECT v FROM "+table+" ORDER BY v")
	require.NoError(t, err)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return vs
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
	assert.Contains(t, err.Error(), "the lock is released")
	assert.NotContains(t, err.Error(), "connection closed")
	assert.EqualValues(t, 1, m.Stat().TotalConns(), "the connection kept: the server ended the transaction, not the session")
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
	for i := range inShort(300, 120) { // under -short every cancel delay three times
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
