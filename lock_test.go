package advisory_test

import (
	"context"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

func TestLockUnlockIsVisibleInPgLocks(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()

	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, advisory.KeyOf(name), l.Key())
	assert.Equal(t, name, l.Name())
	assert.NoError(t, l.Err())
	requireHeldBy(t, l.Key(), l.PID())
	assert.EqualValues(t, 1, m.Stat().AcquiredConns(), "a held lock pins one connection")

	require.NoError(t, l.Unlock(ctx))
	requireFree(t, l.Key())
	requireNoAcquired(t, m)
	select {
	case <-l.Done():
	default:
		t.Fatal("Done not closed after Unlock")
	}
	assert.ErrorIs(t, l.Err(), advisory.ErrNotHeld)
	assert.ErrorIs(t, l.Unlock(ctx), advisory.ErrNotHeld, "second Unlock")
}

func TestTryLockHeldElsewhere(t *testing.T) {
	t.Parallel()
	m1, m2 := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()

	l, err := m1.TryLock(ctx, name)
	require.NoError(t, err)
	requireHeldBy(t, l.Key(), l.PID())

	_, err = m2.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked)
	var le *advisory.LockedError
	require.ErrorAs(t, err, &le)
	assert.Equal(t, name, le.Name)
	assert.Equal(t, advisory.KeyOf(name), le.Key)
	requireNoAcquired(t, m2)
	requireHeldBy(t, l.Key(), l.PID())

	require.NoError(t, l.Unlock(ctx))
	l2, err := m2.TryLock(ctx, name)
	require.NoError(t, err)
	requireHeldBy(t, l2.Key(), l2.PID())
	require.NoError(t, l2.Unlock(ctx))
	requireFree(t, l2.Key())
}

func TestLockWaitsOnServerUntilUnlock(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)

	l1, err := m.Lock(ctx, name)
	require.NoError(t, err)
	got := make(chan *advisory.Lock)
	go func() {
		l2, err := m.Lock(ctx, name)
		assert.NoError(t, err)
		got <- l2
	}()
	waitForWaiters(t, key, 1) // the second Lock waits in pg_advisory_lock, not in a poll loop
	select {
	case <-got:
		t.Fatal("second Lock returned while the first was held")
	default:
	}
	require.NoError(t, l1.Unlock(ctx))
	l2 := <-got
	require.NotNil(t, l2)
	requireHeldBy(t, key, l2.PID())
	require.NoError(t, l2.Unlock(ctx))
	requireFree(t, key)
	requireNoAcquired(t, m)
}

func TestRawKeys(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	for _, key := range []advisory.Key{0, 1, -1, 1 << 62, -1 << 63, 1<<63 - 1} {
		l, err := m.LockKey(ctx, key)
		require.NoError(t, err, "key %d", key)
		requireHeldBy(t, key, l.PID())
		_, err = m.TryLockKey(ctx, key)
		require.ErrorIs(t, err, advisory.ErrLocked)
		// psql's form of the same lock agrees: another session cannot take it either.
		var ok bool
		require.NoError(t, admin.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(key)).Scan(&ok))
		require.False(t, ok, "raw pg_try_advisory_lock(%d) while held", key)
		require.NoError(t, l.Unlock(ctx))
		requireFree(t, key)
	}
}

func TestNameLockMatchesPsqlHashtextextended(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	name := "psql-compatible " + t.Name()
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", name).Scan(&ok))
	require.False(t, ok, "psql's statement took the lock the library holds")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_try_advisory_lock(hashtextextended($1, 0))", name).Scan(&ok))
	require.True(t, ok)
	_, err = m.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked, "library sees psql's lock")
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_advisory_unlock(hashtextextended($1, 0))", name).Scan(&ok))
	require.True(t, ok)
}

func TestDoRunsUnderLockAndReleases(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	ran := false
	err := m.Do(ctx, name, func(ctx context.Context) error {
		ran = true
		rows := lockRows(t, key)
		require.Len(t, rows, 1)
		assert.True(t, rows[0].Granted)
		return nil
	})
	require.NoError(t, err)
	require.True(t, ran)
	requireFree(t, key)
	requireNoAcquired(t, m)

	boom := errors.New("boom")
	err = m.Do(ctx, name, func(context.Context) error { return boom })
	require.ErrorIs(t, err, boom)
	requireFree(t, key)
}

func TestDoCancelsFunctionOnLoss(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	err := m.Do(ctx, name, func(fctx context.Context) error {
		rows := lockRows(t, key)
		require.Len(t, rows, 1)
		terminate(t, rows[0].PID)
		select {
		case <-fctx.Done():
		case <-time.After(10 * time.Second):
			t.Error("fn's ctx not cancelled after the lock was lost")
		}
		assert.ErrorIs(t, context.Cause(fctx), advisory.ErrLockLost)
		return fctx.Err()
	})
	require.ErrorIs(t, err, advisory.ErrLockLost)
	require.ErrorIs(t, err, context.Canceled, "fn's own error is kept")
	requireNoAcquired(t, m)
	// The Manager keeps working.
	require.NoError(t, m.Do(ctx, name, func(context.Context) error { return nil }))
}

func TestLocksAreIndependentSessions(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	a, err := m.Lock(ctx, t.Name()+"/a")
	require.NoError(t, err)
	b, err := m.Lock(ctx, t.Name()+"/b")
	require.NoError(t, err)
	require.NotEqual(t, a.PID(), b.PID(), "each held lock pins its own connection")
	terminate(t, a.PID())
	<-a.Done()
	require.ErrorIs(t, a.Err(), advisory.ErrLockLost)
	require.NoError(t, b.Err(), "losing one lock does not lose another")
	requireHeldBy(t, b.Key(), b.PID())
	require.NoError(t, b.Unlock(ctx))
}

// TestFileRetiresTheConnection: a connection whose socket was handed out with File never
// goes back to the pool, so a later lock cannot land on the session a child keeps alive
// (pool_max_conns=1: without this the next Lock reuses the same backend).
func TestFileRetiresTheConnection(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"pool_max_conns=1"})
	a, err := m.Lock(ctxT(t), t.Name()+"/a")
	require.NoError(t, err)
	f, err := a.File()
	require.NoError(t, err)
	defer f.Close() // the "child" keeps the session alive meanwhile
	require.NoError(t, a.Unlock(ctxT(t)))
	b, err := m.Lock(ctxT(t), t.Name()+"/b")
	require.NoError(t, err)
	assert.NotEqual(t, a.PID(), b.PID(), "the later lock landed on the backend whose socket was handed out")
	requireHeldBy(t, advisory.KeyOf(t.Name()+"/b"), b.PID())
	require.NoError(t, b.Unlock(ctxT(t)))
}

// TestLockWhoseSessionTheServerEndsIsTriedOnce: a Lock whose session the server ends
// before the call returns (here while it waits; in the model, between the grant and the
// end of a named lock's statements) holds nothing and waits for nothing there, so it is
// tried once more on a fresh connection; a second ending is returned, and nothing is left
// held, waited for or pinned.
func TestLockWhoseSessionTheServerEndsIsTriedOnce(t *testing.T) {
	t.Parallel()
	rec := &recorder{}
	m, rival := newManager(t, nil, advisory.WithLogger(slog.New(rec))), newManager(t, nil)
	ctx := ctxT(t)
	key := advisory.KeyOf(t.Name())
	waiterPID := func(not uint32) uint32 {
		var pid uint32
		eventually(t, 10*time.Second, func() bool {
			for _, r := range lockRows(t, key) {
				if !r.Granted && r.PID != not {
					pid = r.PID
					return true
				}
			}
			return false
		}, "a waiter on key %d other than pid %d", key, not)
		return pid
	}
	type result struct {
		l   *advisory.Lock
		err error
	}
	lockAsync := func() chan result {
		out := make(chan result, 1)
		go func() { l, err := m.Lock(ctx, t.Name()); out <- result{l, err} }()
		return out
	}

	h, err := rival.Lock(ctx, t.Name())
	require.NoError(t, err)
	got := lockAsync()
	first := waiterPID(0)
	terminate(t, first)
	second := waiterPID(first) // tried again: a new backend waits
	select {
	case r := <-got:
		t.Fatalf("Lock returned while it should wait again: %v", r.err)
	default:
	}
	require.NoError(t, h.Unlock(ctx))
	r := <-got
	require.NoError(t, r.err, "the first ending is not the caller's business: the call is tried again")
	require.Equal(t, second, r.l.PID())
	requireHeldBy(t, key, second)
	retried := rec.find("advisory: the lock call's session ended before it returned; trying once more")
	require.NotNil(t, retried, "the retry is logged")
	assert.Equal(t, slog.LevelWarn, retried["level"])
	assert.Contains(t, retried["cause"], "57P01")
	require.NoError(t, r.l.Unlock(ctx))

	// Twice in one call: the second ending is returned, and nothing of the call is left.
	h, err = rival.Lock(ctx, t.Name())
	require.NoError(t, err)
	got = lockAsync()
	first = waiterPID(0)
	terminate(t, first)
	terminate(t, waiterPID(first))
	r = <-got
	require.Error(t, r.err)
	require.Nil(t, r.l)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, r.err, &pgErr)
	require.Equal(t, "57P01", pgErr.Code, "the server's own reason is in the error")
	requireHeldBy(t, key, h.PID())
	require.NoError(t, h.Unlock(ctx))
	requireFree(t, key)
	requireNoAcquired(t, m)
}
