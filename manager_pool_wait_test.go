package advisory_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// A Lock queued in the process behind another of its key asks for a connection only once
// that one has the lock. It is then served before a call that asked meanwhile but began
// later: in the pool's own queue it went behind every such call, a second wait which, at
// a fixed connection budget with hot keys, was the p99 (issue 47).
func TestQueuedLockKeepsItsPlaceForAConnection(t *testing.T) {
	t.Parallel()
	m, other := newManager(t, []string{"pool_max_conns=2"}), newManager(t, nil)
	ctx := ctxT(t)
	a, b, c := t.Name()+"/a", t.Name()+"/b", t.Name()+"/c"
	holder, err := other.Lock(ctx, a)
	require.NoError(t, err)
	x, err := m.Lock(ctx, b) // one of m's two connections
	require.NoError(t, err)
	type result struct {
		l   *advisory.Lock
		err error
	}
	lockIn := func(name string) chan result {
		ch := make(chan result, 1)
		go func() { l, err := m.Lock(ctx, name); ch <- result{l, err} }()
		return ch
	}
	first := lockIn(a)
	waitForWaiters(t, holder.Key(), 1) // on m's second connection
	second := lockIn(a)
	eventually(t, 10*time.Second, func() bool { return advisory.QueuedForTest(m, holder.Key()) == 1 },
		"the second Lock of a queued in the process")
	third := lockIn(c) // begun after the second
	eventually(t, 10*time.Second, func() bool { return advisory.ConnWaitsForTest(m) == 1 },
		"the Lock of c waiting for a connection")

	require.NoError(t, holder.Unlock(ctx))
	r1 := <-first
	require.NoError(t, r1.err)
	// The queue in the process lets the second in: it asks for a connection after the third.
	eventually(t, 10*time.Second, func() bool { return advisory.ConnWaitsForTest(m) == 2 },
		"the second Lock of a and the Lock of c waiting for a connection")
	require.NoError(t, x.Unlock(ctx))  // one connection is given back
	waitForWaiters(t, holder.Key(), 1) // the second has it, and waits on the server behind the first
	assert.Empty(t, lockRows(t, advisory.KeyOf(c)), "the Lock of c, begun later, still waits for a connection")
	assert.Equal(t, 1, advisory.ConnWaitsForTest(m))

	require.NoError(t, r1.l.Unlock(ctx))
	r2 := <-second
	require.NoError(t, r2.err)
	requireHeldBy(t, holder.Key(), r2.l.PID())
	r3 := <-third
	require.NoError(t, r3.err)
	requireHeldBy(t, advisory.KeyOf(c), r3.l.PID())
	require.NoError(t, r2.l.Unlock(ctx))
	require.NoError(t, r3.l.Unlock(ctx))
	requireNoAcquired(t, m)
	assert.Equal(t, 0, advisory.PinnedForTest(m))
}

// A call waiting for a connection that the Manager's sessions pin leaves the wait when
// its ctx ends (ErrPoolExhausted with ctx's error) or Close begins (ErrClosed), and
// counts nothing after.
func TestConnWaitEndsWithCtxAndClose(t *testing.T) {
	t.Parallel()
	m, err := advisory.New(ctxT(t), dsn(t, "pool_max_conns=1"))
	require.NoError(t, err)
	defer m.Close()
	ctx := ctxT(t)
	held, err := m.Lock(ctx, t.Name()+"/a")
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = m.Session(wctx)
	require.ErrorIs(t, err, advisory.ErrPoolExhausted)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Equal(t, 0, advisory.ConnWaitsForTest(m))
	assert.Equal(t, 1, advisory.PinnedForTest(m), "the held lock's connection only")

	waiting := make(chan error, 1)
	go func() { _, err := m.Lock(context.Background(), t.Name()+"/b"); waiting <- err }()
	eventually(t, 10*time.Second, func() bool { return advisory.ConnWaitsForTest(m) == 1 },
		"the Lock of b waiting for a connection")
	m.Close()
	require.ErrorIs(t, <-waiting, advisory.ErrClosed, "Close ends a wait for a connection")
	assert.Equal(t, 0, advisory.ConnWaitsForTest(m))
	assert.Equal(t, 0, advisory.PinnedForTest(m))
	requireFree(t, held.Key())
}

// Calls on a small pool whose ctx ends at random points, some while they wait for a
// connection, some just as one is given to them: when all have returned, the Manager
// counts no connection pinned and none waited for, and the pool has none out.
func TestConnWaitsRandomCtx(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"pool_max_conns=3"})
	ctx := ctxT(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	until := time.Now().Add(1500 * time.Millisecond)
	var wg sync.WaitGroup
	for g := range 12 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(seed, uint64(g)))
			for time.Now().Before(until) {
				wctx, cancel := context.WithTimeout(ctx, time.Duration(rng.IntN(6000))*time.Microsecond)
				var l *advisory.Lock
				var err error
				if rng.IntN(4) == 0 {
					l, err = m.TryLock(wctx, t.Name()+"/"+string(rune('a'+rng.IntN(4))))
				} else {
					l, err = m.Lock(wctx, t.Name()+"/"+string(rune('a'+rng.IntN(4))))
				}
				cancel()
				if err != nil {
					continue
				}
				time.Sleep(time.Duration(rng.IntN(2000)) * time.Microsecond)
				assert.NoError(t, l.Unlock(ctx))
			}
		}()
	}
	wg.Wait()
	assert.Equal(t, 0, advisory.ConnWaitsForTest(m))
	assert.Equal(t, 0, advisory.PinnedForTest(m))
	requireNoAcquired(t, m)
}
