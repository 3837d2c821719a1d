package advisory_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// fenceRowCount returns how many rows the fencing table of t's fenceManagers holds.
func fenceRowCount(t *testing.T) int {
	t.Helper()
	var n int
	table := pgx.Identifier{"fence_tokens_" + advisory.KeyOf(t.Name()).String()}.Sanitize()
	require.NoError(t, admin.QueryRow(ctxT(t), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// sharedHolders returns the backends granted key in ShareLock mode (pair: the two-int4
// form).
func sharedHolders(t *testing.T, key advisory.Key, pair bool) []uint32 {
	t.Helper()
	subid := 1
	if pair {
		subid = 2
	}
	rows, err := admin.Query(ctxT(t), `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND mode = 'ShareLock' AND objsubid = $1 AND classid = $2 AND objid = $3 ORDER BY pid`,
		subid, uint32(uint64(key)>>32), uint32(key))
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
	require.NoError(t, err)
	return pids
}

// TestTokenOfASharedLockIsRefused: two shared holders at once get ErrSharedToken, not
// tokens that would make the first one's stale while it still holds the lock; nothing is
// written to the table, both keep the lock; every shared form refuses, before and after
// Unlock.
func TestTokenOfASharedLockIsRefused(t *testing.T) {
	t.Parallel()
	ms := fenceManagers(t, 2)
	ctx := ctxT(t)
	a, err := ms[0].LockShared(ctx, t.Name())
	require.NoError(t, err)
	b, err := ms[1].LockShared(ctx, t.Name())
	require.NoError(t, err)
	for _, l := range []*advisory.Lock{a, b} {
		tok, err := l.Token(ctx)
		require.ErrorIs(t, err, advisory.ErrSharedToken)
		require.Zero(t, tok)
		require.Contains(t, err.Error(), "take the lock exclusively for fenced writes")
		require.NoError(t, l.Err(), "the lock is kept")
	}
	require.ElementsMatch(t, []uint32{a.PID(), b.PID()}, sharedHolders(t, a.Key(), false), "both still hold")
	require.Zero(t, fenceRowCount(t), "no statement was sent")

	key := advisory.KeyOf(t.Name() + "/key")
	pair := advisory.Pair{Class: 7, Object: int32(key)}
	others := []func() (*advisory.Lock, error){
		func() (*advisory.Lock, error) { return ms[0].TryLockShared(ctx, t.Name()+"/try") },
		func() (*advisory.Lock, error) { return ms[0].LockKeyShared(ctx, key) },
		func() (*advisory.Lock, error) { return ms[0].TryLockKeyShared(ctx, key) },
		func() (*advisory.Lock, error) { return ms[1].LockPairShared(ctx, pair) },
		func() (*advisory.Lock, error) { return ms[1].TryLockPairShared(ctx, pair) },
	}
	for i, lock := range others {
		l, err := lock()
		require.NoError(t, err, "lock %d", i)
		_, err = l.Token(ctx)
		require.ErrorIs(t, err, advisory.ErrSharedToken, "lock %d", i)
		require.NoError(t, l.Err(), "lock %d", i)
		require.Contains(t, sharedHolders(t, l.Key(), i >= 3), l.PID(), "lock %d", i)
		require.NoError(t, l.Unlock(ctx))
		_, err = l.Token(ctx)
		require.ErrorIs(t, err, advisory.ErrSharedToken, "lock %d after Unlock", i)
	}
	require.Zero(t, fenceRowCount(t))
	require.NoError(t, a.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
	for _, m := range ms {
		requireNoAcquired(t, m)
	}
}
