package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

func TestPairKeysAreTheTwoInt4Form(t *testing.T) {
	t.Parallel()
	m, other := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	p := advisory.Pair{Class: 7, Object: -9}
	l, err := m.LockPair(ctx, p)
	require.NoError(t, err)
	got, isPair := l.Pair()
	assert.True(t, isPair)
	assert.Equal(t, p, got)

	var classid, objid uint32
	var subid int16
	require.NoError(t, admin.QueryRow(ctx, `SELECT classid::int8, objid::int8, objsubid FROM pg_locks
		WHERE locktype = 'advisory' AND pid = $1`, int32(l.PID())).Scan(&classid, &objid, &subid))
	assert.Equal(t, uint32(7), classid)
	assert.Equal(t, uint32(0xFFFFFFF7), objid, "-9 as an unsigned oid")
	assert.EqualValues(t, 2, subid)

	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(7, -9)").Scan(&ok))
	assert.False(t, ok, "psql's pg_advisory_lock(7, -9) is the same lock")
	_, err = other.TryLockPair(ctx, p)
	var le *advisory.LockedError
	require.ErrorAs(t, err, &le)
	assert.True(t, le.Pair)
	assert.Contains(t, err.Error(), "(7,-9)")

	// The bigint with the same bits is another lock.
	b, err := other.TryLockKey(ctx, advisory.Key(7<<32|0xFFFFFFF7))
	require.NoError(t, err)
	require.NoError(t, b.Unlock(ctx))

	hs, err := other.HoldersPair(ctx, p)
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.True(t, hs[0].Pair)
	assert.Equal(t, l.PID(), hs[0].PID)

	// A cancelled wait for a pair leaves nothing behind; shared pairs coexist.
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = other.LockPair(wctx, p)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	hs, err = other.HoldersPair(ctx, p)
	require.NoError(t, err)
	assert.Len(t, hs, 1)
	require.NoError(t, l.Unlock(ctx))
	r1, err := m.LockPairShared(ctx, p)
	require.NoError(t, err)
	r2, err := other.TryLockPairShared(ctx, p)
	require.NoError(t, err)
	require.NoError(t, r1.Unlock(ctx))
	require.NoError(t, r2.Unlock(ctx))
	hs, err = other.HoldersPair(ctx, p)
	require.NoError(t, err)
	assert.Empty(t, hs)
}
