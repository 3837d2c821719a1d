package advisory_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// handHolder takes the advisory lock key on a connection of its own, as psql or a process
// of another program would, and returns its backend pid.
func handHolder(t *testing.T, key advisory.Key) uint32 {
	t.Helper()
	ctx := ctxT(t)
	conn, err := pgx.Connect(ctx, dsn(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	var ok bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(key)).Scan(&ok))
	require.True(t, ok)
	return conn.PgConn().PID()
}

// TestSemaphoreCrashedHolderFreesItsSlot: a holder whose session dies without a word (no
// Unlock, no NOTIFY) frees its slot to a waiting Acquire: at once if it is the slot the
// waiter waits on, else within SemaphoreRecheck.
func TestSemaphoreCrashedHolderFreesItsSlot(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	for _, watched := range []bool{false, true} {
		s, err := m.Semaphore(fmt.Sprintf("%s/%v", t.Name(), watched), 2)
		require.NoError(t, err)
		keys := s.SlotKeys()
		pids := []uint32{handHolder(t, keys[0]), handHolder(t, keys[1])}
		got := make(chan *advisory.Lock, 1)
		go func() {
			l, err := s.Acquire(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		var waitedOn int
		eventually(t, 10*time.Second, func() bool {
			for i, k := range keys {
				if lockRowsKey(t, k, false) == 1 {
					waitedOn = i
					return true
				}
			}
			return false
		}, "a waiter on a slot")
		victim := 1 - waitedOn
		if watched {
			victim = waitedOn
		}
		start := time.Now()
		terminate(t, pids[victim])
		l := <-got
		took := time.Since(start)
		t.Logf("watched slot %v: crashed holder's slot taken over %v after pg_terminate_backend", watched, took)
		assert.Less(t, took, advisory.SemaphoreRecheck+5*time.Second)
		assert.Equal(t, keys[victim], l.Key())
		requireHeldBy(t, l.Key(), l.PID())
		require.NoError(t, l.Unlock(ctx))
		terminate(t, pids[1-victim])
	}
	requireNoAcquired(t, m)
}

// countingTracer counts the statements sent on a Manager's connections.
type countingTracer struct{ n atomic.Int64 }

func (c *countingTracer) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	c.n.Add(1)
	return ctx
}

func (c *countingTracer) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TestSemaphoreWaitIsNotAPollLoop measures the statements a waiting Acquire sends while
// every slot stays held: one round (tries, the wait, its reconcile) per SemaphoreRecheck.
func TestSemaphoreWaitIsNotAPollLoop(t *testing.T) {
	t.Parallel()
	cfg, err := pgxpool.ParseConfig(dsn(t))
	require.NoError(t, err)
	tracer := &countingTracer{}
	cfg.ConnConfig.Tracer = tracer
	m, err := advisory.NewWithConfig(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	const limit = 4
	s, err := m.Semaphore(t.Name(), limit)
	require.NoError(t, err)
	for _, k := range s.SlotKeys() {
		handHolder(t, k)
	}
	const waitFor = 3 * advisory.SemaphoreRecheck
	ctx, cancel := context.WithTimeout(ctxT(t), waitFor)
	defer cancel()
	before := tracer.n.Load()
	_, err = s.Acquire(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	n := tracer.n.Load() - before
	perSecond := float64(n) / waitFor.Seconds()
	t.Logf("a waiting Acquire (limit %d) sent %d statements in %v: %.1f/s", limit, n, waitFor, perSecond)
	// A round is limit tries, the wait and its reconcile; plus the turnstile, LISTEN,
	// UNLISTEN and new connections' set-up once.
	rounds := int64(waitFor/advisory.SemaphoreRecheck) + 1
	assert.LessOrEqual(t, n, rounds*(limit+2)+20)
	requireNoAcquired(t, m)
}

// TestSemaphoreWaitersPinFewConnections: 20 goroutines of one process waiting on a full
// semaphore use at most 5 connections once they have all queued (the turnstile's holder
// and next waiter, the slot wait, LISTEN, the tries), and all get a slot once it frees.
func TestSemaphoreWaitersPinFewConnections(t *testing.T) {
	t.Parallel()
	m1, m2 := newManager(t, []string{"pool_max_conns=30"}), newManager(t, nil)
	ctx := ctxT(t)
	s1, err := m1.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	s2, err := m2.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	a, err := s2.TryAcquire(ctx)
	require.NoError(t, err)
	b, err := s2.TryAcquire(ctx)
	require.NoError(t, err)
	const waiters = 20
	warm(t, m1, waiters+5) // the first tries of 20 goroutines need not wait for new connections
	var arrived, served atomic.Int64
	done := make(chan struct{})
	for range waiters {
		go func() {
			arrived.Add(1)
			l, err := s1.Acquire(ctx)
			if assert.NoError(t, err) {
				assert.NoError(t, l.Unlock(ctx))
			}
			if served.Add(1) == waiters {
				close(done)
			}
		}()
	}
	// All have queued once every goroutine's first tries are over, which the test cannot
	// see directly: it waits until one waits on the server for the turnstile, its holder
	// for a slot, and the connections in use or being opened have stayed within the bound
	// for 50 polls in a row. Then the bound must hold throughout two re-check rounds.
	calm := 0
	eventually(t, 30*time.Second, func() bool {
		st := m1.Stat()
		if arrived.Load() == waiters && st.AcquiredConns()+st.ConstructingConns() <= 5 &&
			lockRowsKey(t, s1.TurnstileKey(), false) == 1 &&
			lockRowsKey(t, a.Key(), false)+lockRowsKey(t, b.Key(), false) == 1 {
			calm++
		} else {
			calm = 0
		}
		return calm >= 50
	}, "waiters queued, %d connections acquired", m1.Stat().AcquiredConns())
	most := int32(0)
	for end := time.Now().Add(2 * advisory.SemaphoreRecheck); time.Now().Before(end); time.Sleep(time.Millisecond) {
		most = max(most, m1.Stat().AcquiredConns())
	}
	t.Logf("%d goroutines waiting: at most %d connections acquired over %v", waiters, most, 2*advisory.SemaphoreRecheck)
	assert.LessOrEqual(t, most, int32(5))
	require.NoError(t, a.Unlock(ctx))
	require.NoError(t, b.Unlock(ctx))
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("%d of %d waiters served", served.Load(), waiters)
	}
	requireNoAcquired(t, m1)
}

// warm makes m's pool open n connections and keep them idle.
func warm(t *testing.T, m *advisory.Manager, n int) {
	t.Helper()
	ctx := ctxT(t)
	var taken []*advisory.Lock
	for i := range n {
		l, err := m.TryLock(ctx, fmt.Sprintf("%s/warm/%d", t.Name(), i))
		require.NoError(t, err)
		taken = append(taken, l)
	}
	for _, l := range taken {
		require.NoError(t, l.Unlock(ctx))
	}
}
