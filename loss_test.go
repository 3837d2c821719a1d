package advisory_test

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/leak"
)

// TestTerminateBackendIsSeenAtOnce: the watcher reads the idle connection, so the FATAL
// that pg_terminate_backend sends closes Done without any ping.
func TestTerminateBackendIsSeenAtOnce(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	var worst time.Duration
	for i := 0; i < 20; i++ {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		start := time.Now()
		terminate(t, l.PID())
		select {
		case <-l.Done():
		case <-time.After(5 * time.Second):
			t.Fatal("Done not closed 5s after pg_terminate_backend")
		}
		worst = max(worst, time.Since(start))
		require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
		assert.Contains(t, l.Err().Error(), "terminated")
		require.ErrorIs(t, l.Unlock(ctx), advisory.ErrLockLost, "Unlock after loss reports the loss")
		requireNoAcquired(t, m)
	}
	t.Logf("pg_terminate_backend -> Done: worst of 20 = %v", worst)
	// Generous: the bound is milliseconds; a busy CI machine gets room. Speed lives in benchmarks.
	assert.Less(t, worst, time.Second)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err, "the Manager keeps working after losses")
	require.NoError(t, l.Unlock(ctx))
}

// TestPoolReapingNeverRecyclesAPinnedConnection: connection lifetime and idle reaping
// apply to idle pool connections only; a held lock's connection survives them.
func TestPoolReapingNeverRecyclesAPinnedConnection(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"pool_max_conn_lifetime=100ms", "pool_max_conn_lifetime_jitter=0s",
		"pool_max_conn_idle_time=50ms", "pool_health_check_period=20ms"})
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	time.Sleep(time.Second) // ten lifetimes, fifty health checks
	select {
	case <-l.Done():
		t.Fatalf("lock ended by pool maintenance: %v", l.Err())
	default:
	}
	requireHeldBy(t, l.Key(), l.PID())
	require.NoError(t, l.Unlock(ctx))
	requireFree(t, l.Key())
}

// TestCloseReleasesHeldAndEndsWaiting: Close frees what the Manager holds on the server,
// tells the holders, ends waits, and refuses later calls.
func TestCloseReleasesHeldAndEndsWaiting(t *testing.T) {
	t.Parallel()
	other := newManager(t, nil)
	m, err := advisory.New(ctxT(t), dsn(t))
	require.NoError(t, err)
	ctx := ctxT(t)
	held, err := m.Lock(ctx, t.Name()+"/held")
	require.NoError(t, err)
	blocker, err := other.Lock(ctx, t.Name()+"/blocked")
	require.NoError(t, err)
	waitErr := make(chan error, 1)
	go func() {
		_, err := m.Lock(ctx, t.Name()+"/blocked")
		waitErr <- err
	}()
	waitForWaiters(t, blocker.Key(), 1)

	start := time.Now()
	m.Close()
	t.Logf("Close with one held lock and one waiter took %v", time.Since(start))
	require.ErrorIs(t, <-waitErr, advisory.ErrClosed)
	<-held.Done()
	require.ErrorIs(t, held.Err(), advisory.ErrLockLost)
	require.ErrorIs(t, held.Err(), advisory.ErrClosed)
	requireFree(t, held.Key())
	requireHeldBy(t, blocker.Key(), blocker.PID()) // the waiter left the queue

	_, err = m.Lock(ctx, "x")
	require.ErrorIs(t, err, advisory.ErrClosed)
	_, err = m.TryLock(ctx, "x")
	require.ErrorIs(t, err, advisory.ErrClosed)
	require.ErrorIs(t, m.Do(ctx, "x", func(context.Context) error { return nil }), advisory.ErrClosed)
	m.Close() // again: a no-op
	require.NoError(t, blocker.Unlock(ctx))
}

// TestCloseEndsLockWaitingForAPoolConnection: a Lock queued for a connection (not yet on
// the server) is ended by Close too, without a deadline of its own.
func TestCloseEndsLockWaitingForAPoolConnection(t *testing.T) {
	t.Parallel()
	m, err := advisory.New(ctxT(t), dsn(t, "pool_max_conns=1"))
	require.NoError(t, err)
	ctx := context.Background() // no deadline: only Close can end the wait
	held, err := m.Lock(ctx, t.Name()+"/held")
	require.NoError(t, err)
	waitErr := make(chan error, 1)
	go func() {
		_, err := m.Lock(ctx, t.Name()+"/queued")
		waitErr <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it queue on the pool
	m.Close()
	select {
	case err := <-waitErr:
		require.ErrorIs(t, err, advisory.ErrClosed)
	case <-time.After(10 * time.Second):
		t.Fatal("Lock waiting for a pool connection not ended by Close")
	}
	require.ErrorIs(t, held.Err(), advisory.ErrLockLost)
	requireFree(t, held.Key())
	requireFree(t, advisory.KeyOf(t.Name()+"/queued"))
}

// TestCloseLeavesNoGoroutines: after Close, nothing the Manager started keeps running
// (the poller, the watchers, pgxpool's health check), whatever state its locks were in.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	ctx := ctxT(t)
	dsn(t)
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()
	for i := 0; i < 3; i++ {
		m, err := advisory.New(ctx, dsn(t))
		require.NoError(t, err)
		a, err := m.Lock(ctx, t.Name()+"/a")
		require.NoError(t, err)
		b, err := m.Lock(ctx, t.Name()+"/b")
		require.NoError(t, err)
		terminate(t, b.PID()) // one lost: its reader goroutine ran
		<-b.Done()
		_, err = m.TryLock(ctx, t.Name()+"/c")
		require.NoError(t, err) // one left held for Close
		require.NoError(t, a.Unlock(ctx))
		m.Close()
	}
	leak.Goroutines(t, before)
}

func TestLossErrorNamesTheLockAndTheCause(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	l, err := m.Lock(ctx, "report/eu-west")
	require.NoError(t, err)
	terminate(t, l.PID())
	<-l.Done()
	msg := l.Err().Error()
	assert.True(t, strings.HasPrefix(msg, `advisory: lock "report/eu-west": lock lost: the server terminated the session`), msg)
	assert.Equal(t, 1, strings.Count(msg, "advisory:"), msg)
	assert.Contains(t, msg, "57P01")
}

// TestTryLockRightAfterALoss: the pool is still closing the lost lock's connection when
// TryLock runs. That connection is not pinned by anyone: TryLock must get a connection,
// not report the pool exhausted. The lock itself may still be held for a moment: the
// holder is told of a termination before the dying backend has released its locks (up
// to a few hundred ms under load), so ErrLocked is a correct answer until that backend
// is gone, and only then must TryLock succeed.
func TestTryLockRightAfterALoss(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"pool_max_conns=1"})
	ctx := ctxT(t)
	stillHeld := 0
	for i := 0; i < 20; i++ {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		dead := l.PID()
		terminate(t, dead)
		<-l.Done()
		for {
			l, err = m.TryLock(ctx, t.Name())
			if !errors.Is(err, advisory.ErrLocked) {
				break
			}
			stillHeld++
			eventually(t, 10*time.Second, func() bool { return !holds(t, dead, advisory.KeyOf(t.Name())) },
				"attempt %d: ErrLocked, but the terminated backend %d keeps the lock", i, dead)
		}
		require.NoError(t, err, "attempt %d", i)
		require.NoError(t, l.Unlock(ctx))
	}
	t.Logf("the terminated backend still held the lock at TryLock in %d of 20 attempts", stillHeld)
}

// holds reports whether pg_locks shows pid holding key.
func holds(t testing.TB, pid uint32, key advisory.Key) bool {
	for _, r := range lockRows(t, key) {
		if r.Granted && r.PID == pid {
			return true
		}
	}
	return false
}
