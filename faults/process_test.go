package faults_test

import (
	"context"
	"errors"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/leak"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestSIGKILLedHolderIsTakenOver: a holder process is killed mid-hold; a waiter already
// blocked in Lock gets the lock as soon as the server sees the socket close.
func TestSIGKILLedHolderIsTakenOver(t *testing.T) {
	m := newManager(t, "")
	ctx := ctxT(t, 2*time.Minute)
	var takeovers []time.Duration
	for i := 0; i < 10; i++ {
		name := t.Name() + "/" + strconv.Itoa(i)
		key := advisory.KeyOf(name)
		h := startHelper(t, "holder", map[string]string{"ADVISORY_FAULT_DSN": dsn(t), "ADVISORY_FAULT_KEY": name})
		locked := h.expect(t, "LOCKED", 30*time.Second)
		holderPID, _ := strconv.Atoi(strings.Fields(locked.text)[1])
		got := make(chan *advisory.Lock, 1)
		go func() {
			l, err := m.Lock(ctx, name)
			assert.NoError(t, err)
			got <- l
		}()
		require.Eventually(t, func() bool { return waiters(t, key) == 1 }, 10*time.Second, time.Millisecond)
		start := time.Now()
		require.NoError(t, syscall.Kill(h.cmd.Process.Pid, syscall.SIGKILL))
		l := <-got
		takeovers = append(takeovers, time.Since(start))
		require.NotNil(t, l)
		require.EqualValues(t, l.PID(), holderOf(t, key), "the waiter's backend holds the lock")
		require.NotEqualValues(t, holderPID, l.PID())
		require.NoError(t, l.Unlock(ctx))
	}
	sort.Slice(takeovers, func(i, j int) bool { return takeovers[i] < takeovers[j] })
	t.Logf("SIGKILL -> waiter holds the lock: min %v median %v max %v (10 runs)",
		takeovers[0], takeovers[len(takeovers)/2], takeovers[len(takeovers)-1])
	assert.Less(t, takeovers[len(takeovers)-1], 5*time.Second, "generous bound; speed lives in benchmarks")
}

// TestServerRestartTellsEveryHolder: a fast shutdown ends every session; every holder is
// told, Lock calls work again once the server is back, and nothing leaks.
func TestServerRestartTellsEveryHolder(t *testing.T) {
	if srv == nil || srv.Kind() == "env" {
		dsn(t)
		t.Skip("the server came from ADVISORY_TEST_DSN; the harness cannot restart it")
	}
	ctx := ctxT(t, 2*time.Minute)
	goroutines := runtime.NumGoroutine()
	m, err := advisory.New(ctx, pgtest.WithPairs(dsn(t), "pool_max_conns=8"))
	require.NoError(t, err)
	var locks []*advisory.Lock
	for i := 0; i < 5; i++ {
		l, err := m.Lock(ctx, t.Name()+"/"+strconv.Itoa(i))
		require.NoError(t, err)
		locks = append(locks, l)
	}
	start := time.Now()
	require.NoError(t, srv.Restart(ctx))
	for _, l := range locks {
		select {
		case <-l.Done():
		case <-time.After(30 * time.Second):
			t.Fatal("holder not told of the restart")
		}
		require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	}
	t.Logf("restart (stop + start) took %v; every holder told", time.Since(start))
	assert.EqualValues(t, 0, m.Stat().AcquiredConns(), "lost sessions gave their connections back")
	require.Eventually(t, func() bool {
		l, err := m.TryLock(ctx, t.Name())
		return err == nil && l.Unlock(ctx) == nil
	}, 30*time.Second, 50*time.Millisecond, "locking after the restart")
	l, err := m.Lock(ctx, t.Name()+"/0")
	require.NoError(t, err, "a lock held before the restart can be taken again")
	require.NoError(t, l.Unlock(ctx))
	m.Close()
	admin.Reset() // its idle connections died with the server
	leak.Goroutines(t, goroutines)
}

// TestPoolPressure: more Lock calls than pool connections. Given time, every call gets
// the lock in turn and exclusion holds; with short deadlines the calls that cannot get a
// connection fail with ErrPoolExhausted and their ctx's error. Nothing deadlocks or leaks.
func TestPoolPressure(t *testing.T) {
	m := newManager(t, "pool_max_conns=3")
	ctx := ctxT(t, 2*time.Minute)
	const callers = 12
	name := t.Name()

	var inside, maxInside atomic.Int32
	var wg sync.WaitGroup
	for i := 0; i < callers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := m.Do(ctx, name, func(context.Context) error {
				n := inside.Add(1)
				for old := maxInside.Load(); n > old && !maxInside.CompareAndSwap(old, n); old = maxInside.Load() {
				}
				time.Sleep(5 * time.Millisecond)
				inside.Add(-1)
				return nil
			})
			assert.NoError(t, err)
		}()
	}
	wg.Wait()
	assert.EqualValues(t, 1, maxInside.Load(), "one holder at a time")
	assert.EqualValues(t, 0, m.Stat().AcquiredConns())

	// Three held locks pin the whole pool; every other call (each on a key of its own, so
	// they contend for connections, not in the key's queue) must end with its deadline.
	var held []*advisory.Lock
	for i := 0; i < 3; i++ {
		l, err := m.Lock(ctx, name+"/held/"+strconv.Itoa(i))
		require.NoError(t, err)
		held = append(held, l)
	}
	errs := make(chan error, callers)
	start := time.Now()
	for i := 0; i < callers; i++ {
		go func() {
			wctx, cancel := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancel()
			_, err := m.Lock(wctx, name+"/other/"+strconv.Itoa(i))
			errs <- err
		}()
	}
	for i := 0; i < callers; i++ {
		err := <-errs
		require.ErrorIs(t, err, advisory.ErrPoolExhausted)
		require.ErrorIs(t, err, context.DeadlineExceeded)
	}
	assert.Less(t, time.Since(start), 5*time.Second, "bounded by the callers' deadlines")
	_, err := m.TryLock(ctx, name+"/other")
	require.True(t, errors.Is(err, advisory.ErrPoolExhausted), "TryLock does not wait for a connection: %v", err)
	for _, l := range held {
		require.NoError(t, l.Unlock(ctx))
	}
	assert.EqualValues(t, 0, m.Stat().AcquiredConns())
}

// TestLeadTakesOverFromAKilledLeader: the leader is another process; when it is
// SIGKILLed, a candidate waiting in Lead becomes leader and runs its function.
func TestLeadTakesOverFromAKilledLeader(t *testing.T) {
	m := newManager(t, "")
	ctx, cancel := context.WithCancel(ctxT(t, time.Minute))
	name := t.Name()
	h := startHelper(t, "holder", map[string]string{"ADVISORY_FAULT_DSN": dsn(t), "ADVISORY_FAULT_KEY": name})
	h.expect(t, "LOCKED", 30*time.Second)
	started := make(chan time.Time, 1)
	done := make(chan error, 1)
	go func() {
		done <- m.Lead(ctx, name, func(ctx context.Context) error {
			started <- time.Now()
			<-ctx.Done()
			return nil
		})
	}()
	require.Eventually(t, func() bool { return waiters(t, advisory.KeyOf(name)) == 1 }, 10*time.Second, time.Millisecond)
	select {
	case <-started:
		t.Fatal("became leader while the other process led")
	case <-time.After(100 * time.Millisecond):
	}
	killed := time.Now()
	require.NoError(t, syscall.Kill(h.cmd.Process.Pid, syscall.SIGKILL))
	select {
	case at := <-started:
		t.Logf("leader SIGKILLed -> new leader's function running after %v", at.Sub(killed))
	case <-time.After(10 * time.Second):
		t.Fatal("no takeover after the leader was killed")
	}
	cancel()
	require.ErrorIs(t, <-done, context.Canceled)
}

// TestLockTableFullIsADistinctError fills the server's shared lock table from one
// Session (not parallel: while it is full every session on the server fails), checks the
// error names the remedy, that the bulk call left nothing held, and that the server is
// usable again at once.
func TestLockTableFullIsADistinctError(t *testing.T) {
	m := newManager(t, "", advisory.WithSessionLimits(200000, 1000))
	ctx := ctxT(t, time.Minute)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	defer s.Close(ctx)
	names := make([]string, 120000) // far past 64 x (max_connections + ...) here
	for i := range names {
		names[i] = t.Name() + "/" + strconv.Itoa(i)
	}
	err = s.LockAll(ctx, names)
	require.ErrorIs(t, err, advisory.ErrLockTableFull)
	assert.Contains(t, err.Error(), "max_locks_per_transaction")
	assert.Equal(t, 0, s.Held())
	var n int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").Scan(&n))
	assert.Zero(t, n, "the locks taken before the table filled were released")
	l, err := m.Lock(ctx, t.Name()+"/after")
	require.NoError(t, err, "the server takes locks again")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, s.Lock(ctx, t.Name()+"/session-after"), "and so does the Session")
}
