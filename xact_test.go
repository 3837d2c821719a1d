package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

func TestTransactionLocksEndWithTheTransaction(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	for _, end := range []string{"commit", "rollback"} {
		tx, err := admin.Begin(ctx)
		require.NoError(t, err)
		require.NoError(t, advisory.XactLock(ctx, tx, name))
		_, err = m.TryLock(ctx, name)
		require.ErrorIs(t, err, advisory.ErrLocked, "held by the transaction")
		hs, err := m.Holders(ctx, name)
		require.NoError(t, err)
		require.Len(t, hs, 1)
		assert.Equal(t, name, hs[0].Name, "transaction locks are named too")
		if end == "commit" {
			require.NoError(t, tx.Commit(ctx))
		} else {
			require.NoError(t, tx.Rollback(ctx))
		}
		requireFree(t, advisory.KeyOf(name))
	}
}

func TestTryTransactionLockAndSharedMode(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)

	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	err = advisory.TryXactLock(ctx, tx, name)
	require.ErrorIs(t, err, advisory.ErrLocked)
	var one int
	require.NoError(t, tx.QueryRow(ctx, "SELECT 1").Scan(&one), "a failed try leaves the transaction usable")
	require.ErrorIs(t, advisory.TryXactLockShared(ctx, tx, name), advisory.ErrLocked)

	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = advisory.XactLock(wctx, tx, name)
	require.ErrorIs(t, err, context.DeadlineExceeded, "ctx bounds the wait")
	// pgx's default ctx handling closed tx's connection: the transaction, and anything it
	// might have been granted, end with the session. Rollback may say so.
	tx.Rollback(ctx)
	eventually(t, 5*time.Second, func() bool {
		rows := lockRows(t, l.Key())
		return len(rows) == 1 && rows[0].PID == l.PID()
	}, "the cancelled transaction left nothing behind")
	require.NoError(t, l.Unlock(ctx))

	// Shared transaction locks coexist with shared session locks and exclude exclusive ones.
	r, err := m.LockShared(ctx, name)
	require.NoError(t, err)
	tx2, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer tx2.Rollback(ctx)
	require.NoError(t, advisory.XactLockShared(ctx, tx2, name))
	_, err = m.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked)
	require.NoError(t, tx2.Commit(ctx))
	require.NoError(t, r.Unlock(ctx))
	requireFree(t, advisory.KeyOf(name))

	require.ErrorIs(t, advisory.XactLock(ctx, tx2, ""), advisory.ErrInvalidKey)
	assert.Panics(t, func() { advisory.XactLock(ctx, nil, name) })
}
