package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// Fenced work cannot end, abort or leave the holding's transaction, nor change the lock
// connection's session (issue 43, items 1 to 3), on every kind of holding: a session
// holding, a transaction holding on a direct connection, and one through a real
// PgBouncer in transaction mode, where a COMMIT in fn used to free the lock at once while
// its holder believed it held it.

// holdingKind is a Manager of one kind of holding, and another to contend with.
type holdingKind struct {
	name     string
	m, other *advisory.Manager
}

// holdingKinds returns a Manager of each kind of holding.
func holdingKinds(t *testing.T) []holdingKind {
	out := []holdingKind{
		{"session", newManager(t, nil), newManager(t, nil)},
		{"transaction", txManager(t), newManager(t, nil)},
	}
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction)
	return append(out, holdingKind{"pgbouncer transaction", pooledManager(t, b), pooledManager(t, b)})
}

// onEachHolding runs check in a subtest per kind of holding, with a table for its writes
// and the subtest's lock held.
func onEachHolding(t *testing.T, check func(t *testing.T, k holdingKind, ctx context.Context, table string, l *advisory.Lock)) {
	for _, k := range holdingKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			ctx := ctxT(t)
			table := fenceTable(t)
			l, err := k.m.Lock(ctx, t.Name())
			require.NoError(t, err)
			check(t, k, ctx, table, l)
		})
	}
}

// refusedInFencedWork are statements fenced work may not send, each alone or at the end
// of a multi-statement text.
var refusedInFencedWork = []string{
	"COMMIT", "commit work", "END", "ROLLBACK", "abort", "BEGIN", "START TRANSACTION",
	"PREPARE TRANSACTION 'advisory_test'", "SELECT 1; COMMIT", "/* ; */ select 'x;'; Rollback",
	"SELECT pg_catalog.pg_advisory_unlock_all()", "SET statement_timeout = '300ms'",
	"SET SESSION lock_timeout = '1ms'", "RESET ALL", "SELECT set_config('lock_timeout', '1ms', false)",
	"ROLLBACK TO SAVEPOINT advisory_fn", "RELEASE SAVEPOINT advisory_fn", "DISCARD PLANS",
}

func TestFencedWorkCannotEndTheTransaction(t *testing.T) {
	t.Parallel()
	onEachHolding(t, func(t *testing.T, k holdingKind, ctx context.Context, table string, l *advisory.Lock) {
		for i, stmt := range refusedInFencedWork {
			err := l.BeginFunc(ctx, func(tx pgx.Tx) error {
				require.NoError(t, insert(ctx, tx, table, "refused"))
				_, err := tx.Exec(ctx, stmt)
				require.ErrorIs(t, err, advisory.ErrFencedStatement, "%q", stmt)
				if i%2 == 0 { // Query and QueryRow refuse it as well
					_, err = tx.Query(ctx, stmt)
					require.ErrorIs(t, err, advisory.ErrFencedStatement)
					require.ErrorIs(t, tx.QueryRow(ctx, stmt).Scan(), advisory.ErrFencedStatement)
				}
				return nil // ignored: the work still does not commit
			})
			require.ErrorIs(t, err, advisory.ErrFencedStatement, "%q", stmt)
			requireStillHeld(t, k.other, l)
		}
		require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, table, "kept") }))
		require.NoError(t, l.Unlock(ctx))
		require.Equal(t, []string{"kept"}, rowsIn(t, table), "no refused work committed")
	})
}

// requireStillHeld fails unless l holds its lock, told nothing, and other cannot take it.
func requireStillHeld(t *testing.T, other *advisory.Manager, l *advisory.Lock) {
	t.Helper()
	require.NoError(t, l.Err())
	select {
	case <-l.Done():
		t.Fatal("Done closed")
	default:
	}
	requireHeldBy(t, l.Key(), l.PID())
	_, err := other.TryLockKey(ctxT(t), l.Key())
	require.ErrorIs(t, err, advisory.ErrLocked)
}

// TestFencedWorkMayRunItsOwnTransactionLocalStatements: what stays within the transaction
// is sent as it is: SET LOCAL, set_config(..., true), savepoints of fn's own.
func TestFencedWorkMayRunItsOwnTransactionLocalStatements(t *testing.T) {
	t.Parallel()
	onEachHolding(t, func(t *testing.T, k holdingKind, ctx context.Context, table string, l *advisory.Lock) {
		require.ErrorIs(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
			for _, stmt := range []string{"SET LOCAL statement_timeout = '5s'", "SET TRANSACTION READ WRITE",
				"SELECT set_config('application_name', 'fenced', true)", "SET CONSTRAINTS ALL DEFERRED"} {
				if _, err := tx.Exec(ctx, stmt); err != nil {
					return err
				}
			}
			sp, err := tx.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, insert(ctx, sp, table, "undone"))
			_, err = sp.Exec(ctx, "COMMIT")
			require.ErrorIs(t, err, advisory.ErrFencedStatement, "a savepoint is guarded as its parent")
			require.NoError(t, sp.Rollback(ctx))
			return insert(ctx, tx, table, "done")
		}), advisory.ErrFencedStatement, "a refusal in a savepoint fails the whole work")
		require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
			sp, err := tx.Begin(ctx)
			require.NoError(t, err)
			require.NoError(t, insert(ctx, sp, table, "undone"))
			require.NoError(t, sp.Rollback(ctx))
			return insert(ctx, tx, table, "done")
		}))
		require.NoError(t, l.Unlock(ctx))
		require.Equal(t, []string{"done"}, rowsIn(t, table))
	})
}

// TestFencedWorkIgnoringAFailedStatementKeepsTheLock: a statement of fn fails, fn ignores
// it and returns nil: its work is rolled back to its savepoint, the lock and the writes of
// an earlier BeginFunc are kept (issue 43, item 2: a transaction holding lost both).
func TestFencedWorkIgnoringAFailedStatementKeepsTheLock(t *testing.T) {
	t.Parallel()
	onEachHolding(t, func(t *testing.T, k holdingKind, ctx context.Context, table string, l *advisory.Lock) {
		_, err := admin.Exec(ctx, "ALTER TABLE "+table+" ADD UNIQUE (v)")
		require.NoError(t, err)
		require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, table, "first") }))
		err = l.BeginFunc(ctx, func(tx pgx.Tx) error {
			require.NoError(t, insert(ctx, tx, table, "second"))
			require.Error(t, insert(ctx, tx, table, "first"), "a unique violation")
			return nil
		})
		require.ErrorIs(t, err, pgx.ErrTxCommitRollback)
		requireStillHeld(t, k.other, l)
		require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, table, "third") }))
		require.NoError(t, l.Unlock(ctx))
		require.Equal(t, []string{"first", "third"}, rowsIn(t, table))
	})
}

// TestDoTxIsNilOnlyIfItsWorkCommitted: fn sends a COMMIT and ignores the refusal; DoTx
// reports it, and nothing of fn's committed.
func TestDoTxIsNilOnlyIfItsWorkCommitted(t *testing.T) {
	t.Parallel()
	for _, k := range holdingKinds(t) {
		t.Run(k.name, func(t *testing.T) {
			ctx := ctxT(t)
			table := fenceTable(t)
			err := k.m.DoTx(ctx, t.Name(), func(ctx context.Context, tx pgx.Tx) error {
				require.NoError(t, insert(ctx, tx, table, "a"))
				_, err := tx.Exec(ctx, "COMMIT")
				require.ErrorIs(t, err, advisory.ErrFencedStatement)
				_, err = k.other.TryLock(ctxT(t), t.Name())
				require.ErrorIs(t, err, advisory.ErrLocked, "the lock is still held after the refused COMMIT")
				require.NoError(t, ctx.Err())
				return insert(ctx, tx, table, "b")
			})
			require.ErrorIs(t, err, advisory.ErrFencedStatement)
			require.NotErrorIs(t, err, advisory.ErrLockLost)
			require.Empty(t, rowsIn(t, table))
		})
	}
}

// TestFencedSettingsNeverReachLaterHoldings: a session-level SET in fn is refused, so a
// later Lock on the same connection waits as long as it must (issue 43, item 3: it failed
// with fn's statement_timeout).
func TestFencedSettingsNeverReachLaterHoldings(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := newManager(t, []string{"pool_max_conns=1"})
	other := newManager(t, nil)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	err = l.BeginFunc(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SET statement_timeout = '100ms'; SET lock_timeout = '100ms'")
		return err
	})
	require.ErrorIs(t, err, advisory.ErrFencedStatement)
	require.NoError(t, l.Unlock(ctx))
	held, err := other.Lock(ctx, t.Name()+"/held")
	require.NoError(t, err)
	time.AfterFunc(500*time.Millisecond, func() { _ = held.Unlock(context.Background()) })
	l2, err := m.Lock(ctx, t.Name()+"/held") // the same pooled connection (pool of one)
	require.NoError(t, err, "the wait outlived fn's refused timeouts")
	assert.Equal(t, l.PID(), l2.PID(), "the same connection as the BeginFunc's")
	require.NoError(t, l2.Unlock(ctx))
}

// TestFencedWorkEndingTheTransactionThroughConnIsALoss: statements sent through
// tx.Conn() are not read; one that ends a transaction holding's transaction freed the
// lock, and the holding ends as lost with that cause when fn returns.
func TestFencedWorkEndingTheTransactionThroughConnIsALoss(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := txManager(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	err = l.BeginFunc(ctx, func(tx pgx.Tx) error {
		_, err := tx.Conn().Exec(ctx, "COMMIT")
		return err
	})
	require.ErrorIs(t, err, advisory.ErrLockLost)
	<-l.Done()
	require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	require.Contains(t, l.Err().Error(), "fenced work ended the lock's transaction itself")
	requireFree(t, l.Key())
}
