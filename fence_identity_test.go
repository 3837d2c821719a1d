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

// TestPairAndKeyTokensAreIndependent: LockPair({7, x}) and LockKey(7<<32 | x) are
// different locks, held at once; each counts its own tokens (both 1 on a fresh table),
// each CheckToken* accepts its own, and a newer pair holder's token leaves the key
// holder's current. A pair's first token starts above its key's newest.
func TestPairAndKeyTokensAreIndependent(t *testing.T) {
	t.Parallel()
	ms := fenceManagers(t, 2)
	ctx := ctxT(t)
	pair := advisory.Pair{Class: 7, Object: int32(advisory.KeyOf(t.Name()))}
	key := advisory.Key(int64(pair.Class)<<32 | int64(uint32(pair.Object)))
	kl, err := ms[0].LockKey(ctx, key)
	require.NoError(t, err)
	pl, err := ms[1].LockPair(ctx, pair)
	require.NoError(t, err)
	require.Equal(t, key, pl.Key(), "the same 64 bits")
	requireHeldBy(t, key, kl.PID())

	// The pair first: a pair's first token starts above its key's newest (for tables of
	// earlier versions, where they shared a row), and here the key has none yet.
	pTok, err := pl.Token(ctx)
	require.NoError(t, err)
	kTok, err := kl.Token(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), pTok, "the pair's first token")
	require.Equal(t, int64(1), kTok, "the key's first token")

	check := func(f func(tx pgx.Tx) error) error {
		tx, err := admin.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx)
		return f(tx)
	}
	require.NoError(t, check(func(tx pgx.Tx) error { return ms[1].CheckTokenKey(ctx, tx, key, kTok) }))
	require.NoError(t, check(func(tx pgx.Tx) error { return ms[0].CheckTokenPair(ctx, tx, pair, pTok) }))

	// A newer pair holder takes tokens 2 and 3: the key holder's token 1 stays current,
	// the pair's 1 and 2 are stale.
	for want := int64(2); want <= 3; want++ {
		require.NoError(t, pl.Unlock(ctx))
		pl, err = ms[1].LockPair(ctx, pair)
		require.NoError(t, err)
		pTok, err = pl.Token(ctx)
		require.NoError(t, err)
		require.Equal(t, want, pTok)
	}
	require.NoError(t, check(func(tx pgx.Tx) error { return ms[1].CheckTokenKey(ctx, tx, key, kTok) }),
		"the pair's newer tokens do not make the key's stale")
	require.NoError(t, check(func(tx pgx.Tx) error { return ms[0].CheckTokenPair(ctx, tx, pair, 3) }))
	for _, stale := range []int64{1, 2} {
		require.ErrorIs(t, check(func(tx pgx.Tx) error { return ms[0].CheckTokenPair(ctx, tx, pair, stale) }), advisory.ErrStaleToken)
	}
	require.ErrorIs(t, check(func(tx pgx.Tx) error { return ms[0].CheckTokenKey(ctx, tx, key, 3) }), advisory.ErrStaleToken,
		"the key never took token 3")

	// A name's lock is its key's lock: CheckToken and CheckTokenKey read the same row.
	nl, err := ms[0].Lock(ctx, t.Name())
	require.NoError(t, err)
	nTok, err := nl.Token(ctx)
	require.NoError(t, err)
	require.NoError(t, check(func(tx pgx.Tx) error { return ms[1].CheckToken(ctx, tx, t.Name(), nTok) }))
	require.NoError(t, check(func(tx pgx.Tx) error { return ms[1].CheckTokenKey(ctx, tx, nl.Key(), nTok) }))
	np := advisory.Pair{Class: int32(nl.Key() >> 32), Object: int32(nl.Key())}
	require.ErrorIs(t, check(func(tx pgx.Tx) error { return ms[1].CheckTokenPair(ctx, tx, np, nTok) }),
		advisory.ErrStaleToken, "no pair token was ever taken")
	npl, err := ms[1].LockPair(ctx, np)
	require.NoError(t, err)
	npTok, err := npl.Token(ctx)
	require.NoError(t, err)
	require.Equal(t, nTok+1, npTok, "a pair's first token starts above its key's newest")
	require.NoError(t, check(func(tx pgx.Tx) error { return ms[1].CheckToken(ctx, tx, t.Name(), nTok) }),
		"and leaves the key's current")
	for _, l := range []*advisory.Lock{kl, pl, nl, npl} {
		require.NoError(t, l.Unlock(ctx))
	}
	for _, m := range ms {
		requireNoAcquired(t, m)
	}
}
