package advisory_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestSharedHoldingRefusesWhatNeedsItsOwnSession: the calls that use a holding's
// session as its own fail clearly; Do, DoTx and Lead take a session of their own.
func TestSharedHoldingRefusesWhatNeedsItsOwnSession(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithSharedSessions(10))
	ctx := ctxT(t)
	name := t.Name()
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	_, err = l.Token(ctx)
	assert.ErrorIs(t, err, advisory.ErrSharedSession, "Token")
	_, err = l.File()
	assert.ErrorIs(t, err, advisory.ErrSharedSession, "File")
	assert.ErrorIs(t, l.BeginFunc(ctx, func(pgx.Tx) error { return nil }), advisory.ErrSharedSession, "BeginFunc")
	assert.ErrorIs(t, l.Publish(ctx, "v"), advisory.ErrSharedSession, "Publish")
	_, err = l.Drain(ctx)
	assert.ErrorIs(t, err, advisory.ErrSharedSession, "Drain")
	assert.Contains(t, l.WorkAppName("app"), "/"+strconv.FormatUint(uint64(l.Key()), 36)+"/"+
		strconv.FormatUint(uint64(l.PID()), 36)+".", "tagged for its key, on its session")
	requireHeldBy(t, l.Key(), l.PID())

	// Do drains: its lock stands on a session of its own, beside the shared one.
	require.NoError(t, m.Do(ctx, name+"/do", func(fctx context.Context) error {
		in := advisory.LockFromContext(fctx)
		assert.NotEqual(t, l.PID(), in.PID(), "Do's lock shares no session")
		_, err := in.Drain(fctx)
		return err
	}))
	require.NoError(t, l.Unlock(ctx))
	requireNoAcquired(t, m)

	// Transaction holdings cannot share.
	_, err = advisory.New(ctx, dsn(t), advisory.WithSharedSessions(10), advisory.WithHolding(advisory.HoldingTransaction))
	assert.ErrorIs(t, err, advisory.ErrInvalidOption)
	_, err = advisory.New(ctx, dsn(t), advisory.WithSharedSessions(0))
	assert.ErrorIs(t, err, advisory.ErrInvalidOption)
}

// TestSharedHoldingsEndWithTheManager: Close tells every shared holding.
func TestSharedHoldingsEndWithTheManager(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m, err := advisory.New(ctx, dsn(t), advisory.WithSharedSessions(100))
	require.NoError(t, err)
	ls := holdNames(t, m, t.Name(), 20)
	m.Close()
	for _, l := range ls {
		select {
		case <-l.Done():
		default:
			t.Fatal("a shared holding's Done is open after the Manager's Close returned")
		}
		assert.ErrorIs(t, l.Err(), advisory.ErrLockLost)
		assert.ErrorIs(t, l.Err(), advisory.ErrClosed)
		eventually(t, 5*time.Second, func() bool { return len(lockRows(t, l.Key())) == 0 }, "key freed")
	}
}

// TestSharedHoldingReentered: a nested Do of the same name under a shared holding
// re-enters it, and ends before it.
func TestSharedHoldingReentered(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithSharedSessions(10), advisory.WithoutDrain())
	ctx := ctxT(t)
	name := t.Name()
	require.NoError(t, m.Do(ctx, name, func(fctx context.Context) error {
		outer := advisory.LockFromContext(fctx)
		return m.Do(fctx, name, func(ictx context.Context) error {
			inner := advisory.LockFromContext(ictx)
			assert.True(t, inner.Reentered())
			assert.Equal(t, outer.Key(), inner.Key())
			requireHeldBy(t, outer.Key(), outer.PID())
			return nil
		})
	}))
	requireFree(t, advisory.KeyOf(name))
	requireNoAcquired(t, m)
}

// TestSharedSessionRetiredPastItsLimit: a shared session that once held more locks than
// WithSessionLimits' retireAfter is closed when it empties (a backend pays for every lock
// it held until it exits); one that held fewer goes back to the pool.
func TestSharedSessionRetiredPastItsLimit(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	for _, c := range []struct {
		retireAfter int
		retired     bool
	}{{5, true}, {50, false}} {
		m := newManager(t, nil, advisory.WithSharedSessions(100), advisory.WithSessionLimits(100, c.retireAfter))
		var ls []*advisory.Lock
		for i := range 8 {
			l, err := m.Lock(ctx, fmt.Sprintf("%s/%d/%d", t.Name(), c.retireAfter, i))
			require.NoError(t, err)
			ls = append(ls, l)
		}
		pid := ls[0].PID()
		require.Len(t, pidsOf(ls), 1)
		for _, l := range ls {
			require.NoError(t, l.Unlock(ctx))
		}
		requireNoAcquired(t, m)
		alive := func() bool {
			var n int
			require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n))
			return n == 1
		}
		if c.retired {
			eventually(t, 5*time.Second, func() bool { return !alive() }, "the session that held 8 > 5 locks is closed")
		} else {
			time.Sleep(100 * time.Millisecond)
			assert.True(t, alive(), "the session that held 8 <= 50 locks went back to the pool")
		}
	}
}

// TestSharedSessionInHolders: Holders shows each lock of a shared session on its pid, by
// key: a shared session's batches name no lock.
func TestSharedSessionInHolders(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithSharedSessions(10))
	ctx := ctxT(t)
	a, err := m.Lock(ctx, t.Name()+"/a")
	require.NoError(t, err)
	b, err := m.Lock(ctx, t.Name()+"/b")
	require.NoError(t, err)
	require.Equal(t, a.PID(), b.PID())
	for _, l := range []*advisory.Lock{a, b} {
		hs, err := m.Holders(ctx, l.Name())
		require.NoError(t, err)
		require.Len(t, hs, 1)
		assert.Equal(t, l.PID(), hs[0].PID)
		assert.True(t, hs[0].Granted)
		assert.Equal(t, l.Key(), hs[0].Key)
		assert.Empty(t, hs[0].Name, "a shared session's statements name no lock: %s", l.Name())
	}
	require.NoError(t, a.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
}

// heartbeatHoldsShared (TestHeartbeatIdleReaper, behind a 2 s idle reaper): holdings on a
// shared session stay held through 5 s with WithHeartbeat(500ms), which beats on the
// shared session as on a Session's.
func heartbeatHoldsShared(t *testing.T, dsn string) {
	ctx := ctxT(t)
	m, err := advisory.New(ctx, dsn, advisory.WithHeartbeat(500*time.Millisecond), advisory.WithSharedSessions(10))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	var ls []*advisory.Lock
	for i := range 3 {
		l, err := m.Lock(ctx, fmt.Sprintf("%s/%d", t.Name(), i))
		require.NoError(t, err)
		ls = append(ls, l)
	}
	require.Len(t, pidsOf(ls), 1)
	time.Sleep(5 * time.Second) // 2.5 times the reaper's limit
	for _, l := range ls {
		require.NoError(t, l.Err(), "a shared holding behind the reaper")
		requireHeldBy(t, l.Key(), l.PID())
		require.NoError(t, l.Unlock(ctx))
	}
	requireNoAcquired(t, m)
}
