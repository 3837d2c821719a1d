package advisory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// fenceTable creates a table for t's writes and returns its name.
func fenceTable(t *testing.T) string {
	t.Helper()
	table := pgx.Identifier{"fence_" + advisory.KeyOf(t.Name()).String()}.Sanitize()
	_, err := admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (v text)")
	require.NoError(t, err)
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+table) })
	return table
}

func rowsIn(t *testing.T, table string) []string {
	t.Helper()
	rows, err := admin.Query(context.Background(), "SELECT v FROM "+table+" ORDER BY v")
	require.NoError(t, err)
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return out
}

func insert(ctx context.Context, tx pgx.Tx, table, v string) error {
	_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", v)
	return err
}

// TestBeginFuncCommitsOnTheLocksSession: fn runs on the holding backend, commits on nil,
// rolls back on error, and the lock stays held and watched throughout.
func TestBeginFuncCommitsOnTheLocksSession(t *testing.T) {
	t.Parallel()
	m, ctx, table, l := lockedForFence(t)
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
		var pid uint32
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		assert.Equal(t, l.PID(), pid, "fn runs on the lock's own backend")
		return insert(ctx, tx, table, "committed")
	}))
	boom := errors.New("boom")
	err := l.BeginFunc(ctx, func(tx pgx.Tx) error {
		require.NoError(t, insert(ctx, tx, table, "rolled back"))
		return boom
	})
	require.ErrorIs(t, err, boom)
	require.Equal(t, []string{"committed"}, rowsIn(t, table))
	requireHeldBy(t, l.Key(), l.PID())
	require.NoError(t, l.Err())
	// Still watched after the transactions: a termination is seen at once.
	terminate(t, l.PID())
	select {
	case <-l.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("loss after BeginFunc not seen")
	}
	require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	requireNoAcquired(t, m)
}

// TestBeginFuncLossWhileFnRuns: the session is terminated while fn does other work.
// Done closes at once, fn's next statement fails, nothing commits, and BeginFunc reports
// the loss; the connection goes back when it returns.
func TestBeginFuncLossWhileFnRuns(t *testing.T) {
	t.Parallel()
	m, ctx, table, l := lockedForFence(t)
	var seen time.Duration
	err := l.BeginFunc(ctx, func(tx pgx.Tx) error {
		require.NoError(t, insert(ctx, tx, table, "before the loss"))
		start := time.Now()
		terminate(t, l.PID())
		select {
		case <-l.Done(): // while fn is still running: the holder is told first
			seen = time.Since(start)
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed during fn")
		}
		require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
		return insert(ctx, tx, table, "after the loss")
	})
	require.ErrorIs(t, err, advisory.ErrLockLost)
	t.Logf("pg_terminate_backend -> Done during fn: %v; error: %v", seen, err)
	require.Empty(t, rowsIn(t, table), "nothing commits after a loss")
	requireNoAcquired(t, m)
	require.ErrorIs(t, l.Unlock(ctx), advisory.ErrLockLost)
	require.ErrorIs(t, l.BeginFunc(ctx, func(pgx.Tx) error { t.Fatal("fn called after loss"); return nil }), advisory.ErrLockLost)
}

// TestBeginFuncLossWhileFnIgnoresIt: fn does not look at Done and tries to commit after
// the session is gone: the commit fails with ErrLockLost.
func TestBeginFuncLossWhileFnIgnoresIt(t *testing.T) {
	t.Parallel()
	m, ctx, table, l := lockedForFence(t)
	err := l.BeginFunc(ctx, func(tx pgx.Tx) error {
		require.NoError(t, insert(ctx, tx, table, "x"))
		terminate(t, l.PID())
		eventually(t, 5*time.Second, func() bool { return l.Err() != nil }, "loss seen")
		return nil // commit
	})
	require.ErrorIs(t, err, advisory.ErrLockLost)
	require.Empty(t, rowsIn(t, table))
	requireNoAcquired(t, m)
}

// TestBeginFuncPanicRollsBackAndKeepsTheLock.
func TestBeginFuncPanicRollsBackAndKeepsTheLock(t *testing.T) {
	t.Parallel()
	_, ctx, table, l := lockedForFence(t)
	func() {
		defer func() { require.Equal(t, "fn panics", recover()) }()
		l.BeginFunc(ctx, func(tx pgx.Tx) error {
			require.NoError(t, insert(ctx, tx, table, "panicked"))
			panic("fn panics")
		})
	}()
	require.Empty(t, rowsIn(t, table))
	require.NoError(t, l.Err())
	requireHeldBy(t, l.Key(), l.PID())
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, table, "after") }))
	require.Equal(t, []string{"after"}, rowsIn(t, table))
	require.NoError(t, l.Unlock(ctx))
	requireFree(t, l.Key())
}

// TestBeginFuncCtxCancelKeepsTheLock: a statement of fn cancelled by ctx fails the
// transaction (rolled back) but not the connection: the lock stays held.
func TestBeginFuncCtxCancelKeepsTheLock(t *testing.T) {
	t.Parallel()
	m, ctx, table, l := lockedForFence(t)
	for _, during := range []string{"statement", "fn"} {
		cctx, cancel := context.WithCancel(ctx)
		err := l.BeginFunc(cctx, func(tx pgx.Tx) error {
			require.NoError(t, insert(cctx, tx, table, "cancelled "+during))
			if during == "fn" {
				cancel() // fn then returns nil: the transaction must not commit
				return nil
			}
			time.AfterFunc(50*time.Millisecond, cancel)
			_, err := tx.Exec(cctx, "SELECT pg_sleep(30)")
			return err
		})
		cancel()
		require.ErrorIs(t, err, context.Canceled, during)
		require.NotErrorIs(t, err, advisory.ErrLockLost, during)
		require.NoError(t, l.Err(), during)
		requireHeldBy(t, l.Key(), l.PID())
	}
	require.Empty(t, rowsIn(t, table))
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, table, "after") }))
	require.Equal(t, []string{"after"}, rowsIn(t, table))
	require.NoError(t, l.Unlock(ctx))
	requireNoAcquired(t, m)
}

// TestBeginFuncSerializesWithUnlockAndItself: a second BeginFunc and an Unlock wait for
// the transaction in progress (bounded by their ctx).
func TestBeginFuncSerializesWithUnlockAndItself(t *testing.T) {
	t.Parallel()
	m, ctx, table, l := lockedForFence(t)
	inFn, release := make(chan struct{}), make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		assert.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
			close(inFn)
			<-release
			return insert(ctx, tx, table, "first")
		}))
	}()
	<-inFn
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, l.Unlock(short), context.DeadlineExceeded, "Unlock waits for the transaction")
	require.ErrorIs(t, l.BeginFunc(short, func(pgx.Tx) error { return nil }), context.DeadlineExceeded)
	second := make(chan error, 1)
	go func() { second <- l.BeginFunc(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, table, "second") }) }()
	unlocked := make(chan error, 1)
	go func() { <-second; unlocked <- l.Unlock(ctx) }()
	close(release)
	wg.Wait()
	require.NoError(t, <-unlocked)
	require.Equal(t, []string{"first", "second"}, rowsIn(t, table))
	requireFree(t, l.Key())
	requireNoAcquired(t, m)
}

// TestBeginFuncManagerCloseEndsTheTransaction: Close during fn shuts the connection:
// the transaction cannot commit, the lock is freed, and BeginFunc reports the loss.
func TestBeginFuncManagerCloseEndsTheTransaction(t *testing.T) {
	t.Parallel()
	m, ctx, table, l := lockedForFence(t)
	closed := make(chan struct{})
	err := l.BeginFunc(ctx, func(tx pgx.Tx) error {
		require.NoError(t, insert(ctx, tx, table, "x"))
		go func() { m.Close(); close(closed) }()
		eventually(t, 5*time.Second, func() bool { return len(lockRows(t, l.Key())) == 0 }, "lock freed by Close")
		return nil
	})
	require.ErrorIs(t, err, advisory.ErrLockLost)
	require.ErrorIs(t, err, advisory.ErrClosed)
	<-closed
	require.Empty(t, rowsIn(t, table))
}

// TestDoTx: lock, fenced transaction, unlock; fn's ctx ends on loss.
func TestDoTx(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	table := fenceTable(t)
	key := advisory.KeyOf(t.Name())
	require.NoError(t, m.DoTx(ctx, t.Name(), func(ctx context.Context, tx pgx.Tx) error {
		var n int
		require.NoError(t, tx.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted").Scan(&n))
		assert.Equal(t, 1, n, "fn runs on the holding session")
		return insert(ctx, tx, table, "done")
	}))
	requireFree(t, key)
	err := m.DoTx(ctx, t.Name(), func(ctx context.Context, tx pgx.Tx) error {
		require.NoError(t, insert(ctx, tx, table, "lost"))
		var pid uint32
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		terminate(t, pid)
		<-ctx.Done()
		require.ErrorIs(t, context.Cause(ctx), advisory.ErrLockLost)
		return ctx.Err()
	})
	require.ErrorIs(t, err, advisory.ErrLockLost)
	require.Equal(t, []string{"done"}, rowsIn(t, table))
	requireFree(t, key)
	requireNoAcquired(t, m)
}

// TestSessionBeginFunc: fenced by all the Session's locks; a loss fails the commit.
func TestSessionBeginFunc(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	table := fenceTable(t)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, s.LockAll(ctx, []string{t.Name() + "/a", t.Name() + "/b"}))
	require.NoError(t, s.BeginFunc(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, table, "ok") }))
	require.Equal(t, 2, s.Held())
	err = s.BeginFunc(ctx, func(tx pgx.Tx) error {
		terminate(t, s.PID())
		<-s.Done()
		return insert(ctx, tx, table, "stale")
	})
	require.ErrorIs(t, err, advisory.ErrLockLost)
	require.Equal(t, []string{"ok"}, rowsIn(t, table))
	require.ErrorIs(t, s.Err(), advisory.ErrLockLost)
	requireNoAcquired(t, m)
}

// lockedForFence starts most BeginFunc tests: a Manager, the test's ctx, an empty table
// to write to, and the lock named after the test, held.
func lockedForFence(t *testing.T) (*advisory.Manager, context.Context, string, *advisory.Lock) {
	t.Helper()
	m := newManager(t, nil)
	ctx := ctxT(t)
	table := fenceTable(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	return m, ctx, table, l
}
