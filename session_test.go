package advisory_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

func names(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s/%d", prefix, i)
	}
	return out
}

// heldBy counts the keys of names that pid holds, per pg_locks.
func heldBy(t *testing.T, pid uint32, ns []string) int {
	t.Helper()
	keys := make([]int64, len(ns))
	for i, n := range ns {
		keys[i] = int64(advisory.KeyOf(n))
	}
	var c int
	require.NoError(t, admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l
		JOIN unnest($2::bigint[]) AS k(k) ON l.classid = ((k >> 32) & 4294967295)::oid AND l.objid = (k & 4294967295)::oid
		WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND l.pid = $1`, int32(pid), keys).Scan(&c))
	return c
}

func TestSessionHoldsManyLocksOnOneConnection(t *testing.T) {
	t.Parallel()
	m, other := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	ns := names(t.Name(), 500)
	require.NoError(t, s.LockAll(ctx, ns))
	assert.Equal(t, 500, s.Held())
	assert.Equal(t, 500, heldBy(t, s.PID(), ns), "all 500 on the Session's one backend")
	assert.EqualValues(t, 1, m.Stat().AcquiredConns())
	_, err = other.TryLock(ctx, ns[123])
	require.ErrorIs(t, err, advisory.ErrLocked)

	// Reentrant: a second hold counts up; it takes two Unlocks.
	require.NoError(t, s.Lock(ctx, ns[0]))
	require.NoError(t, s.Unlock(ctx, ns[0]))
	assert.Equal(t, 1, heldBy(t, s.PID(), ns[:1]))
	require.NoError(t, s.Unlock(ctx, ns[0]))
	assert.Equal(t, 0, heldBy(t, s.PID(), ns[:1]))
	require.ErrorIs(t, s.Unlock(ctx, ns[0]), advisory.ErrNotHeld)

	require.NoError(t, s.Close(ctx))
	assert.Equal(t, 0, heldBy(t, s.PID(), ns))
	assert.ErrorIs(t, s.Err(), advisory.ErrNotHeld)
	requireNoAcquired(t, m)
	assert.ErrorIs(t, s.Close(ctx), advisory.ErrNotHeld)
	err = s.Lock(ctx, ns[0])
	assert.ErrorIs(t, err, advisory.ErrNotHeld)
	assert.Contains(t, err.Error(), "the session was closed")
}

func TestSessionTryLockAllIsAllOrNothing(t *testing.T) {
	t.Parallel()
	m, other := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	ns := names(t.Name(), 20)
	busy, err := other.Lock(ctx, ns[7])
	require.NoError(t, err)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	defer s.Close(ctx)
	err = s.TryLockAll(ctx, ns)
	var le *advisory.LockedError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, ns[7], le.Name)
	assert.Equal(t, 0, heldBy(t, s.PID(), ns), "none taken")
	assert.Equal(t, 0, s.Held())
	require.ErrorIs(t, s.TryLock(ctx, ns[7]), advisory.ErrLocked)
	require.NoError(t, s.TryLock(ctx, ns[8]), "the Session is still good")
	require.NoError(t, busy.Unlock(ctx))
	require.NoError(t, s.TryLockAll(ctx, ns))
	assert.Equal(t, 20, heldBy(t, s.PID(), ns))
}

func TestSessionCancelledBulkLockLeavesNothing(t *testing.T) {
	t.Parallel()
	m, other := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	ns := names(t.Name(), 50)
	// The blocker holds the highest key: the bulk statement takes the others, then waits.
	last := ns[0]
	for _, n := range ns {
		if advisory.KeyOf(n) > advisory.KeyOf(last) {
			last = n
		}
	}
	blocker, err := other.Lock(ctx, last)
	require.NoError(t, err)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	defer s.Close(ctx)
	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	err = s.LockAll(wctx, ns)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 0, heldBy(t, s.PID(), ns), "the 49 taken before the wait were released")
	assert.Len(t, lockRows(t, advisory.KeyOf(last)), 1, "no waiter left behind")
	require.NoError(t, blocker.Unlock(ctx))
	require.NoError(t, s.LockAll(ctx, ns), "the Session is still good")
	assert.Equal(t, 50, heldBy(t, s.PID(), ns))
}

func TestSessionLossAndLimits(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithSessionLimits(10, 5))
	ctx := ctxT(t)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, s.LockAll(ctx, names(t.Name(), 11)), advisory.ErrTooManyLocks)
	require.NoError(t, s.LockAll(ctx, names(t.Name(), 10)))
	require.ErrorIs(t, s.Lock(ctx, t.Name()+"/extra"), advisory.ErrTooManyLocks)
	terminate(t, s.PID())
	<-s.Done()
	require.ErrorIs(t, s.Err(), advisory.ErrLockLost)
	require.ErrorIs(t, s.Lock(ctx, t.Name()+"/after"), advisory.ErrLockLost)
	requireNoAcquired(t, m)

	// A Session that held more than the retire threshold closes its connection at Close.
	s, err = m.Session(ctx)
	require.NoError(t, err)
	pid := s.PID()
	require.NoError(t, s.LockAll(ctx, names(t.Name()+"/b", 6)))
	require.NoError(t, s.Close(ctx))
	require.Eventually(t, func() bool {
		var n int
		admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n)
		return n == 0
	}, 5*time.Second, 10*time.Millisecond, "the backend that held many locks was retired")
	_, err = advisory.New(ctx, dsn(t), advisory.WithSessionLimits(5, 6))
	require.ErrorIs(t, err, advisory.ErrInvalidOption)
}

func TestManagerCloseEndsSessions(t *testing.T) {
	t.Parallel()
	m, err := advisory.New(ctxT(t), dsn(t))
	require.NoError(t, err)
	ctx := ctxT(t)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	ns := names(t.Name(), 5)
	require.NoError(t, s.LockAll(ctx, ns))
	m.Close()
	<-s.Done()
	require.ErrorIs(t, s.Err(), advisory.ErrLockLost)
	require.ErrorIs(t, s.Err(), advisory.ErrClosed)
	assert.Equal(t, 0, heldBy(t, s.PID(), ns))
	_, err = m.Session(ctx)
	require.ErrorIs(t, err, advisory.ErrClosed)
}
