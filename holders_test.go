package advisory_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

func TestHoldersShowsHolderAndWaitersWithNames(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"application_name=inspector-test"})
	ctx := ctxT(t)
	name := t.Name() + " / weird */ name /* with \x01 controls and 'quotes'"
	before := time.Now()
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	waiting := make(chan error, 1)
	go func() {
		l2, err := m.Lock(ctx, name)
		if err == nil {
			err = l2.Unlock(ctx)
		}
		waiting <- err
	}()
	waitForWaiters(t, l.Key(), 1)

	hs, err := m.Holders(ctx, name)
	require.NoError(t, err)
	require.Len(t, hs, 2)
	h, w := hs[0], hs[1]
	assert.True(t, h.Granted)
	assert.False(t, w.Granted)
	assert.Equal(t, l.PID(), h.PID)
	for _, x := range hs {
		assert.Equal(t, l.Key(), x.Key)
		assert.Equal(t, name, x.Name, "the name is read back from the statement text")
		assert.False(t, x.Shared)
		assert.False(t, x.Pair)
		assert.Equal(t, "inspector-test", x.ApplicationName)
		assert.Contains(t, x.ClientAddr, "127.0.0.1:")
		assert.False(t, x.BackendStart.IsZero())
		assert.WithinDuration(t, before, x.Since, time.Minute)
	}
	assert.Equal(t, "idle", h.State)
	assert.Equal(t, "active", w.State)

	all, err := m.AllHolders(ctx)
	require.NoError(t, err)
	var mine int
	for _, x := range all {
		if x.Key == l.Key() {
			mine++
		}
	}
	assert.Equal(t, 2, mine)

	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, <-waiting)
	hs, err = m.Holders(ctx, name)
	require.NoError(t, err)
	assert.Empty(t, hs)
}

func TestHoldersOfRawAndForeignLocks(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	key := advisory.Key(-1 << 40) // high half negative: checks the classid/objid round trip
	l, err := m.LockKey(ctx, key)
	require.NoError(t, err)
	hs, err := m.HoldersKey(ctx, key)
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, key, hs[0].Key)
	assert.Empty(t, hs[0].Name, "a raw key has no name")
	require.NoError(t, l.Unlock(ctx))

	// A lock taken from psql in the two-int4 form shows as a Pair.
	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock(7, 9)")
	require.NoError(t, err)
	all, err := m.AllHolders(ctx)
	require.NoError(t, err)
	found := false
	for _, h := range all {
		if h.Pair && h.Key == advisory.Key(7<<32|9) {
			found = true
			assert.Equal(t, uint32(conn.Conn().PgConn().PID()), h.PID)
		}
	}
	assert.True(t, found, "the (7, 9) lock is listed: %+v", all)
	_, err = conn.Exec(ctx, "SELECT pg_advisory_unlock(7, 9)")
	require.NoError(t, err)
}

func TestSharedLocks(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	r1, err := m.LockShared(ctx, name)
	require.NoError(t, err)
	r2, err := m.TryLockShared(ctx, name)
	require.NoError(t, err, "readers coexist")
	assert.True(t, r1.Shared())
	_, err = m.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked, "a writer is excluded by readers")

	writer := make(chan *advisory.Lock, 1)
	go func() {
		w, err := m.Lock(ctx, name)
		assert.NoError(t, err)
		writer <- w
	}()
	waitForWaiters(t, r1.Key(), 1)
	hs, err := m.Holders(ctx, name)
	require.NoError(t, err)
	require.Len(t, hs, 3)
	assert.True(t, hs[0].Shared && hs[1].Shared && !hs[2].Shared)

	require.NoError(t, r1.Unlock(ctx))
	select {
	case <-writer:
		t.Fatal("the writer got in while a reader still held the lock")
	case <-time.After(50 * time.Millisecond):
	}
	require.NoError(t, r2.Unlock(ctx))
	w := <-writer
	requireHeldBy(t, w.Key(), w.PID())
	_, err = m.TryLockShared(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked, "readers are excluded by a writer")
	require.NoError(t, w.Unlock(ctx))

	// Raw keys, and a cancelled shared wait, behave the same.
	key := advisory.Key(424242)
	x, err := m.LockKey(ctx, key)
	require.NoError(t, err)
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = m.LockKeyShared(wctx, key)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	requireHeldBy(t, key, x.PID())
	require.NoError(t, x.Unlock(ctx))
	s, err := m.TryLockKeyShared(ctx, key)
	require.NoError(t, err)
	require.NoError(t, s.Unlock(ctx))
	requireFree(t, key)
}

// Names whose comment the server would cut (track_activity_query_size, 1024 bytes by
// default) come back as a marked start; shorter ones come back whole. Checked for the
// Manager's locks and a Session's, ASCII and not.
func TestHoldersLongNames(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	long := t.Name() + "/" + strings.Repeat("x", advisory.MaxNameLen-len(t.Name())-1)
	wide := t.Name() + "/" + strings.Repeat("日", 300) // 900 bytes, quoted 1800
	fits := t.Name() + "/" + strings.Repeat("y", 700)
	for _, name := range []string{long, wide, fits} {
		l, err := m.Lock(ctx, name)
		require.NoError(t, err)
		hs, err := m.Holders(ctx, name)
		require.NoError(t, err)
		require.Len(t, hs, 1)
		h := hs[0]
		if name == fits {
			assert.Equal(t, name, h.Name)
			assert.False(t, h.NameTruncated)
		} else {
			assert.True(t, h.NameTruncated, "a %d-byte name", len(name))
			assert.True(t, strings.HasPrefix(name, h.Name), "the start of the name")
			assert.Greater(t, len(h.Name), 200, "a useful start")
		}
		require.NoError(t, l.Unlock(ctx))
	}
	s, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Lock(ctx, long))
	hs, err := m.Holders(ctx, long)
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.True(t, hs[0].NameTruncated)
	assert.True(t, strings.HasPrefix(long, hs[0].Name))
	require.NoError(t, s.Close(ctx))
}

// Holders carry names: a Manager whose connection string sets no application_name calls
// its sessions "PROGRAM HOST/PID"; one that sets it keeps its own.
func TestHoldersHaveApplicationNames(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	host, err := os.Hostname()
	require.NoError(t, err)
	want := filepath.Base(os.Args[0]) + " " + host + "/" + strconv.Itoa(os.Getpid())
	if len(want) > 63 {
		want = want[len(want)-63:]
	}
	for _, tc := range []struct {
		extra []string
		want  string
	}{{nil, want}, {[]string{"application_name=billing-worker"}, "billing-worker"}} {
		m := newManager(t, tc.extra)
		name := t.Name() + "/" + tc.want
		l, err := m.Lock(ctx, name)
		require.NoError(t, err)
		hs, err := m.Holders(ctx, name)
		require.NoError(t, err)
		require.Len(t, hs, 1)
		assert.Equal(t, tc.want, hs[0].ApplicationName)
		require.NoError(t, l.Unlock(ctx))
	}
}

// TestHoldersSinceIsTheGrant: a holder's Since stays when the lock was granted after the
// holder runs statements on its connection (an announcement, a token, a heartbeat), which
// move pg_stat_activity's times; it used to show the last statement's end.
func TestHoldersSinceIsTheGrant(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithHeartbeat(100*time.Millisecond))
	ctx := ctxT(t)
	before := time.Now()
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	granted := time.Now()
	time.Sleep(350 * time.Millisecond) // heartbeats run meanwhile
	published := time.Now()
	require.NoError(t, l.Publish(ctx, ""))
	hs, err := m.Holders(ctx, t.Name())
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, t.Name(), hs[0].Name)
	assert.False(t, hs[0].Since.Before(before.Add(-time.Millisecond)), "Since %v, locked at %v", hs[0].Since, before)
	assert.True(t, hs[0].Since.Before(published), "Since %v is the grant (%v), not the last statement (after %v)",
		hs[0].Since, granted, published)
	require.NoError(t, l.Unlock(ctx))
}
