package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// workConn opens a connection that does l's work, from connString (the test server's by
// default), closed when the test ends.
func workConn(t *testing.T, l *advisory.Lock, connString string) *pgx.Conn {
	t.Helper()
	if connString == "" {
		connString = dsn(t)
	}
	tagged, err := l.WorkConnString(connString)
	require.NoError(t, err)
	c, err := pgx.Connect(ctxT(t), tagged)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// slowWork starts, on c, a transaction that writes marker into work_marks and then sleeps
// for a minute before it would commit. It waits until the transaction is inside the
// sleep, and returns the backend's pid and a channel with the work's error.
func slowWork(t *testing.T, c *pgx.Conn, marker string) (uint32, <-chan error) {
	t.Helper()
	ctx := ctxT(t)
	marksOnce.Do(func() {
		_, marksErr = admin.Exec(ctx, "CREATE TABLE IF NOT EXISTS work_marks (marker text)")
	})
	require.NoError(t, marksErr)
	var pid uint32 // the real backend's (behind a proxy PgConn.PID is the proxy's)
	require.NoError(t, c.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
	done, finished := make(chan error, 1), make(chan struct{})
	go func() {
		defer close(finished)
		_, err := c.Exec(context.Background(), "BEGIN; INSERT INTO work_marks VALUES ($$"+marker+"$$); "+
			"SELECT pg_sleep(60); COMMIT")
		done <- err
	}()
	t.Cleanup(func() { // before the connection's own cleanup closes it
		admin.Exec(context.Background(), "SELECT pg_terminate_backend($1)", int32(pid))
		<-finished
	})
	eventually(t, 10*time.Second, func() bool {
		var waiting bool
		err := admin.QueryRow(ctx, "SELECT wait_event = 'PgSleep' FROM pg_stat_activity WHERE pid = $1",
			int32(pid)).Scan(&waiting)
		return err == nil && waiting
	}, "work of backend %d in its sleep", pid)
	return pid, done
}

var (
	marksOnce sync.Once
	marksErr  error
)

// backendGone reports whether no session has the pid.
func backendGone(t testing.TB, pid uint32) bool {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n))
	return n == 0
}

func markerCommitted(t testing.TB, marker string) bool {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT count(*) FROM work_marks WHERE marker = $1", marker).Scan(&n))
	return n > 0
}

// lostWithWork takes the lock with the given name on m, starts a tagged slow transaction
// for it, and then terminates the lock's backend: the lock is free, its holder's work
// still runs. It returns the work's backend pid and the work's error channel.
func lostWithWork(t *testing.T, m *advisory.Manager, name string) (uint32, <-chan error) {
	t.Helper()
	l, err := m.Lock(ctxT(t), name)
	require.NoError(t, err)
	pid, done := slowWork(t, workConn(t, l, ""), t.Name())
	terminate(t, l.PID())
	<-l.Done()
	return pid, done
}

// TestDoDrainsAnEarlierHoldersWork: the earlier holder's lock is gone but its tagged
// transaction still runs; Do terminates it, and it is gone and rolled back before fn is
// called.
func TestDoDrainsAnEarlierHoldersWork(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithDrainWait(0))
	workPID, workDone := lostWithWork(t, first, name)
	called := false
	err := second.Do(ctxT(t), name, func(ctx context.Context) error {
		called = true
		require.True(t, backendGone(t, workPID), "the earlier holder's work backend runs while fn does")
		require.False(t, markerCommitted(t, t.Name()), "the earlier holder's work committed")
		require.NotNil(t, advisory.LockFromContext(ctx))
		return nil
	})
	require.NoError(t, err)
	require.True(t, called)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, <-workDone, &pgErr, "the work's transaction must have been cut off")
	assert.Equal(t, "57P01", pgErr.Code, "terminated by the drain")
	require.False(t, markerCommitted(t, t.Name()))
	requireNoAcquired(t, second)
}

// forgersDatabase creates a database of the test's own for LOGIN-only roles' sessions
// and drops it when the test ends. A forger there, rather than in template1, never makes
// a parallel test's CREATE DATABASE (advisorytest's, a copy of template1) fail with
// "source database is being accessed by other users". It is made from template0, which
// no session can hold open. Call it before tempRole: the role's clean-up, which runs
// first, ends its sessions.
func forgersDatabase(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	db := fmt.Sprintf("forgers_%d", rand.Uint32())
	_, err := admin.Exec(ctx, "CREATE DATABASE "+db+" TEMPLATE template0")
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(ctx, "DROP DATABASE "+db)
		assert.NoError(t, err)
	})
	return db
}

// tempRole creates a LOGIN role with password "pw", dropped with its sessions when the
// test ends.
func tempRole(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("work_%d", rand.Uint32())
	_, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD 'pw'")
	require.NoError(t, err)
	t.Cleanup(func() {
		admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		eventually(t, 10*time.Second, func() bool {
			var n int
			require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role).Scan(&n))
			return n == 0
		}, "sessions of role %s gone", role)
		_, err := admin.Exec(ctx, "DROP ROLE "+role)
		assert.NoError(t, err)
	})
	return role
}

// TestLockFromContext: fn's ctx in Do, TryDo, DoTx and Lead carries the Lock; others do
// not.
func TestLockFromContext(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	require.Nil(t, advisory.LockFromContext(context.Background()))
	check := func(ctx context.Context) error {
		l := advisory.LockFromContext(ctx)
		if l == nil || l.Name() != t.Name() || l.Err() != nil {
			return errors.New("no held Lock in fn's ctx")
		}
		return nil
	}
	require.NoError(t, m.Do(ctxT(t), t.Name(), check))
	ran, err := m.TryDo(ctxT(t), t.Name(), 0, check)
	require.True(t, ran)
	require.NoError(t, err)
	require.NoError(t, m.DoTx(ctxT(t), t.Name(), func(ctx context.Context, _ pgx.Tx) error { return check(ctx) }))
	require.NoError(t, m.Lead(ctxT(t), t.Name(), check))
}

// urlOf returns the test server's connection settings as a URL with the given query.
func urlOf(t *testing.T, query string) string {
	t.Helper()
	cc, err := pgx.ParseConfig(dsn(t))
	require.NoError(t, err)
	return fmt.Sprintf("postgres://%s@%s:%d/%s?%s", cc.User, cc.Host, cc.Port, cc.Database, query)
}

// TestDoCancelledDuringTheDrainLosesNothing: a Do whose ctx ends while its drain runs
// (cancelled from the Acquired hook, a few hundred microseconds after the lock is held)
// returns the ctx's error (or runs fn, if the drain was done), never a loss: the drain's
// statements are not interrupted by ctx. With a 10 ms cancel grace an interrupted
// statement often loses the connection, as a slow CancelRequest does under load
// (TestModel found it so).
func TestDoCancelledDuringTheDrainLosesNothing(t *testing.T) {
	t.Parallel()
	var cancelNext atomic.Pointer[context.CancelFunc]
	var delay atomic.Int64
	m := newManager(t, nil, advisory.WithCancelGrace(10*time.Millisecond),
		advisory.WithHooks(advisory.Hooks{Acquired: func(advisory.LockEvent) {
			if c := cancelNext.Load(); c != nil {
				time.AfterFunc(time.Duration(delay.Load()), *c)
			}
		}}))
	for i := range 60 {
		ctx, cancel := context.WithCancel(context.Background())
		cancelNext.Store(&cancel)
		delay.Store(int64(i%15) * int64(40*time.Microsecond))
		err := m.Do(ctx, t.Name(), func(context.Context) error { return nil })
		cancel()
		require.NotErrorIs(t, err, advisory.ErrLockLost, "try %d", i)
		if err != nil {
			require.ErrorIs(t, err, context.Canceled, "try %d", i)
		}
	}
	requireNoAcquired(t, m)
	requireFree(t, advisory.KeyOf(t.Name()))
}

// TestWithoutDrainLeavesEarlierWorkAlone: with WithoutDrain, Do calls fn at once and an
// earlier holder's tagged work runs on (the caller chose that); Lock.Drain still drains.
func TestWithoutDrainLeavesEarlierWorkAlone(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithoutDrain(), advisory.WithDrainWait(0))
	workPID, _ := lostWithWork(t, first, name)
	require.NoError(t, second.Do(ctxT(t), name, func(context.Context) error {
		require.False(t, backendGone(t, workPID), "drained although WithoutDrain")
		return nil
	}))
	l, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	report, err := l.Drain(ctxT(t))
	require.NoError(t, err)
	require.Len(t, report.Sessions, 1)
	require.True(t, backendGone(t, workPID))
	require.NoError(t, l.Unlock(ctxT(t)))
}
