package advisory

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// twoManagers returns two Managers on the test server (two processes, as far as its
// locks are concerned) and an admin connection, closed at the test's end.
func twoManagers(t *testing.T) (context.Context, *pgx.Conn, *Manager, *Manager) {
	ctx, dsn, admin := serverConn(t)
	m1, err := New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(m1.Close)
	m2, err := New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(m2.Close)
	return ctx, admin, m1, m2
}

// awaitWaiter polls holders until it lists a session waiting for name, and returns that
// waiter and the list it was in.
func awaitWaiter(t *testing.T, name string, holders func() []Holder) (Holder, []Holder) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "no session waits for %q", name)
		hs := holders()
		for _, h := range hs {
			if !h.Granted {
				return h, hs
			}
		}
	}
}

// TestNamedLockTriesByKeyFirst checks, on the server, what a named lock that its
// connection has not prepared runs (pin_named.go): a free lock is taken by the key's
// prepared try, and the session then shows the name's comment, so Holders names it; a
// taken lock is waited for with the named statement, so the waiter shows its name too;
// a TryLock of a taken lock holds nothing; shared locks go the same way, even on the
// Manager whose Lock just waited (one wait alone does not make its Lock calls skip the
// try: see TestContendedNamedLocksSkipTheTry).
func TestNamedLockTriesByKeyFirst(t *testing.T) {
	ctx, admin, m1, m2 := twoManagers(t)
	name := t.Name()
	holders := func() []Holder {
		hs, err := m1.Holders(ctx, name)
		require.NoError(t, err)
		return hs
	}

	l1, err := m1.Lock(ctx, name)
	require.NoError(t, err)
	if !l1.s.st.direct {
		t.Skip("the test server is not reached directly: named locks run the checked statements")
	}
	assert.Equal(t, nameComment(name), lastQuery(t, ctx, admin, l1.PID()), "a free lock: the try by key, then the comment")
	hs := holders()
	require.Len(t, hs, 1)
	assert.Equal(t, Holder{Key: KeyOf(name), Name: name, Granted: true, PID: l1.PID()},
		Holder{Key: hs[0].Key, Name: hs[0].Name, Granted: hs[0].Granted, PID: hs[0].PID})

	_, err = m2.TryLock(ctx, name)
	var locked *LockedError
	require.ErrorAs(t, err, &locked)
	assert.Equal(t, []uint32{l1.PID()}, heldBy(t, ctx, admin, KeyOf(name)), "a failed TryLock holds nothing")

	got := make(chan *Lock, 1)
	go func() {
		l, err := m2.Lock(ctx, name)
		assert.NoError(t, err)
		got <- l
	}()
	waiter, _ := awaitWaiter(t, name, holders)
	assert.Equal(t, name, waiter.Name, "a waiter shows the name it waits for")
	assert.Equal(t, statementsFor(name, false, false, true).lock, lastQuery(t, ctx, admin, waiter.PID),
		"a taken lock is waited for with the named statement")
	require.NoError(t, l1.Unlock(ctx))
	var l2 *Lock
	select {
	case l2 = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was not granted the lock")
	}
	require.NotNil(t, l2)
	assert.Equal(t, []uint32{waiter.PID}, heldBy(t, ctx, admin, KeyOf(name)))
	hs = holders()
	require.Len(t, hs, 1)
	assert.Equal(t, name, hs[0].Name)
	require.NoError(t, l2.Unlock(ctx))
	assert.Empty(t, heldBy(t, ctx, admin, KeyOf(name)))

	s1, err := m1.LockShared(ctx, name)
	require.NoError(t, err)
	s2, err := m2.LockShared(ctx, name)
	require.NoError(t, err)
	hs = holders()
	require.Len(t, hs, 2)
	for _, h := range hs {
		assert.True(t, h.Granted && h.Shared, "%+v", h)
		assert.Equal(t, name, h.Name)
		assert.Equal(t, nameComment(name), lastQuery(t, ctx, admin, h.PID))
	}
	require.NoError(t, s1.Unlock(ctx))
	require.NoError(t, s2.Unlock(ctx))
}

// TestContendedNamedLocksSkipTheTry checks, on the server, the Manager's contention
// average (pin_named.go): once its named Lock calls' tries by key have found their locks
// taken often, a Lock sends the named statement at once (the held session shows it, not
// the comment the try leaves), except one call in probeEvery, which tries first; once
// those probes have found locks free often enough, every Lock tries first again.
// Holders names every lock throughout, and every lock is the server's (pg_locks).
func TestContendedNamedLocksSkipTheTry(t *testing.T) {
	ctx, admin, m1, m2 := twoManagers(t)
	n := 0
	fresh := func() string { n++; return fmt.Sprintf("%s/%d", t.Name(), n) }
	// lockFree takes a fresh name on m2, uncontended, and reports whether it was tried by
	// key first (the session shows the comment) or sent the named statement at once.
	lockFree := func() (tried bool) {
		name := fresh()
		l, err := m2.Lock(ctx, name)
		require.NoError(t, err)
		assert.Equal(t, []uint32{l.PID()}, heldBy(t, ctx, admin, KeyOf(name)))
		hs, err := m2.Holders(ctx, name)
		require.NoError(t, err)
		require.Len(t, hs, 1)
		assert.Equal(t, name, hs[0].Name)
		q := lastQuery(t, ctx, admin, l.PID())
		require.NoError(t, l.Unlock(ctx))
		switch q {
		case nameComment(name):
			return true
		case statementsFor(name, false, false, true).lock:
			return false
		}
		t.Fatalf("the session of %q shows neither of its statements: %q", name, q)
		return false
	}

	l, err := m2.Lock(ctx, fresh())
	require.NoError(t, err)
	if !l.s.st.direct {
		t.Skip("the test server is not reached directly: named locks run the checked statements")
	}
	require.NoError(t, l.Unlock(ctx))
	for range probeEvery {
		require.True(t, lockFree(), "a Manager that has met no contention tries first")
	}

	// Contention: m2 finds each name held by m1 and waits until m1 lets go.
	for range 12 {
		name := fresh()
		held, err := m1.Lock(ctx, name)
		require.NoError(t, err)
		got := make(chan *Lock, 1)
		go func() {
			l, err := m2.Lock(ctx, name)
			assert.NoError(t, err)
			got <- l
		}()
		awaitWaiter(t, name, func() []Holder { // m2 waits
			hs, err := m1.Holders(ctx, name)
			require.NoError(t, err)
			return hs
		})
		require.NoError(t, held.Unlock(ctx))
		l := <-got
		require.NotNil(t, l)
		assert.Equal(t, []uint32{l.PID()}, heldBy(t, ctx, admin, KeyOf(name)))
		require.NoError(t, l.Unlock(ctx))
	}
	require.Greater(t, m2.taken.rate.Load(), int32(contendedAbove))

	tries := 0
	for range 2 * probeEvery {
		if lockFree() {
			tries++
		}
	}
	assert.Equal(t, 2, tries, "contended: one Lock in %d tries first", probeEvery)

	for i := 0; m2.taken.rate.Load() > contendedAbove; i++ {
		require.Less(t, i, 50*probeEvery, "the probes do not bring the average down")
		lockFree()
	}
	for range probeEvery {
		require.True(t, lockFree(), "the probes found locks free: every Lock tries first again")
	}
}
