package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/checkctx"
)

// Issue 38: holdings that share server sessions (WithSharedSessions), against the real
// server: who holds what is read from pg_locks.

// holdNames takes n distinct locks of prefix on m, from n goroutines at once, and
// returns them in name order.
func holdNames(t *testing.T, m *advisory.Manager, prefix string, n int) []*advisory.Lock {
	t.Helper()
	ls := make([]*advisory.Lock, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ls[i], errs[i] = m.Lock(ctxT(t), fmt.Sprintf("%s/%d", prefix, i))
		}()
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))
	return ls
}

// pidsOf returns the distinct backends of ls.
func pidsOf(ls []*advisory.Lock) map[uint32]int {
	out := map[uint32]int{}
	for _, l := range ls {
		out[l.PID()]++
	}
	return out
}

func TestSharedSessionsHoldManyLocksOnFewConnections(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithSharedSessions(100))
	ctx := ctxT(t)
	name := t.Name()

	// One after another: every lock on the same session.
	var seq []*advisory.Lock
	for i := range 30 {
		l, err := m.Lock(ctx, fmt.Sprintf("%s/seq/%d", name, i))
		require.NoError(t, err)
		seq = append(seq, l)
	}
	require.Len(t, pidsOf(seq), 1, "30 locks taken one after another share one session")
	for _, l := range seq {
		requireHeldBy(t, l.Key(), l.PID())
	}
	assert.EqualValues(t, 1, m.Stat().AcquiredConns(), "30 held locks pin one connection")

	// 60 goroutines at once: sessions as statements in flight, not one per lock.
	par := holdNames(t, m, name+"/par", 60)
	pids := pidsOf(append(par, seq...))
	assert.LessOrEqual(t, len(pids), 10, "90 held locks, sessions: %v", pids)
	assert.EqualValues(t, len(pids), m.Stat().AcquiredConns(), "one connection per shared session")
	for _, l := range par {
		requireHeldBy(t, l.Key(), l.PID())
		assert.NoError(t, l.Err())
	}
	t.Logf("90 held locks on %d sessions", len(pids))

	// Each Unlock releases its own key, and the other holdings on its session stay.
	require.NoError(t, seq[0].Unlock(ctx))
	requireFree(t, seq[0].Key())
	requireHeldBy(t, seq[1].Key(), seq[1].PID())
	assert.ErrorIs(t, seq[0].Err(), advisory.ErrNotHeld)
	assert.ErrorIs(t, seq[0].Unlock(ctx), advisory.ErrNotHeld, "second Unlock")

	for _, l := range append(par, seq[1:]...) {
		require.NoError(t, l.Unlock(ctx))
		requireFree(t, l.Key())
	}
	requireNoAcquired(t, m) // a session that holds nothing goes back to the pool
}

func TestSharedSessionTerminatedTellsEveryHolding(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithSharedSessions(100))
	ctx := ctxT(t)
	name := t.Name()
	var ls []*advisory.Lock
	for i := range 20 {
		l, err := m.TryLock(ctx, fmt.Sprintf("%s/%d", name, i))
		require.NoError(t, err)
		ls = append(ls, l)
	}
	require.Len(t, pidsOf(ls), 1)
	terminate(t, ls[0].PID())
	start := time.Now()
	for i, l := range ls {
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("holding %d not told 10 s after its session was terminated", i)
		}
		require.ErrorIs(t, l.Err(), advisory.ErrLockLost, "holding %d", i)
		assert.ErrorIs(t, l.Unlock(ctx), advisory.ErrLockLost, "Unlock of lost holding %d", i)
	}
	t.Logf("20 holdings told in %v", time.Since(start))
	for _, l := range ls {
		eventually(t, 5*time.Second, func() bool { return len(lockRows(t, l.Key())) == 0 }, "key freed")
	}
	requireNoAcquired(t, m)
	// The names can be taken again, on a new session.
	again := holdNames(t, m, name, 20)
	for _, l := range again {
		requireHeldBy(t, l.Key(), l.PID())
		require.NoError(t, l.Unlock(ctx))
	}
}

// TestSharedSessionsNeverTwoHoldersInOneProcess: PostgreSQL grants a key again to the
// session that holds it, so two goroutines of one Manager sharing a session could both
// "hold" it. Goroutines take three contended names by Lock and TryLock, exclusive and
// shared, beside other locks that keep the shared sessions populated; a counter per name
// says who is inside.
func TestSharedSessionsNeverTwoHoldersInOneProcess(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithSharedSessions(50))
	ctx := ctxT(t)
	name := t.Name()
	filler := holdNames(t, m, name+"/filler", 10)
	type state struct {
		mu                sync.Mutex
		exclusive, shared int
	}
	states := make([]state, 3)
	var wg sync.WaitGroup
	var bad, got, refused int64
	var mu sync.Mutex
	for g := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 150 {
				k := (g + i) % len(states)
				n := fmt.Sprintf("%s/contended/%d", name, k)
				var l *advisory.Lock
				var err error
				switch (g + i) % 4 {
				case 0:
					l, err = m.Lock(ctx, n)
				case 1:
					l, err = m.TryLock(ctx, n)
				case 2:
					l, err = m.LockShared(ctx, n)
				default:
					l, err = m.TryLockShared(ctx, n)
				}
				if errors.Is(err, advisory.ErrLocked) {
					mu.Lock()
					refused++
					mu.Unlock()
					continue
				}
				if !assert.NoError(t, err) {
					return
				}
				s := &states[k]
				s.mu.Lock()
				if l.Shared() {
					s.shared++
				} else {
					s.exclusive++
				}
				wrong := s.exclusive > 1 || (s.exclusive == 1 && s.shared > 0)
				s.mu.Unlock()
				mu.Lock()
				got++
				if wrong {
					bad++
				}
				mu.Unlock()
				time.Sleep(100 * time.Microsecond)
				s.mu.Lock()
				if l.Shared() {
					s.shared--
				} else {
					s.exclusive--
				}
				s.mu.Unlock()
				assert.NoError(t, l.Unlock(ctx))
			}
		}()
	}
	wg.Wait()
	t.Logf("%d taken, %d refused, %d overlaps", got, refused, bad)
	assert.Zero(t, bad, "an exclusive holding overlapped another holding of its key")
	assert.Positive(t, got)
	for _, l := range filler {
		requireHeldBy(t, l.Key(), l.PID())
		require.NoError(t, l.Unlock(ctx))
	}
	requireNoAcquired(t, m)
}

// TestSharedTryLockCancelledAtEveryCheckLeavesNothingHeld ends a TryLock's ctx at each
// place it looks at it in turn, beside a holding on the same shared session.
func TestSharedTryLockCancelledAtEveryCheckLeavesNothingHeld(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithSharedSessions(10))
	ctx := ctxT(t)
	name := t.Name()
	other, err := m.Lock(ctx, name+"/other")
	require.NoError(t, err)
	cancelled := 0
	for _, byDone := range []bool{false, true} {
		for n := 1; n <= 20; n++ {
			c := checkctx.CancelAt(ctx, n)
			if byDone {
				c = checkctx.CancelAtDone(ctx, n)
			}
			l, err := m.TryLock(c, name)
			if err != nil {
				require.ErrorIs(t, err, context.Canceled, "cancelled at check %d (done %v)", n, byDone)
				cancelled++
				requireFree(t, advisory.KeyOf(name))
			} else {
				requireHeldBy(t, l.Key(), l.PID())
				require.NoError(t, l.Unlock(ctx))
			}
			requireHeldBy(t, other.Key(), other.PID())
		}
	}
	assert.Positive(t, cancelled)
	require.NoError(t, other.Unlock(ctx))
	requireNoAcquired(t, m)
}

// TestSharedLockWaitsOnASessionOfItsOwn: a Lock whose key another process holds waits
// on a session of its own, and a cancelled wait leaves nothing.
func TestSharedLockWaitsOnASessionOfItsOwn(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithSharedSessions(10))
	other := newManager(t, nil)
	ctx := ctxT(t)
	name := t.Name()
	mine, err := m.Lock(ctx, name+"/mine")
	require.NoError(t, err)
	theirs, err := other.Lock(ctx, name)
	require.NoError(t, err)

	wctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = m.Lock(wctx, name)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	requireHeldBy(t, theirs.Key(), theirs.PID())

	got := make(chan *advisory.Lock)
	go func() {
		l, err := m.Lock(ctx, name)
		assert.NoError(t, err)
		got <- l
	}()
	waitForWaiters(t, advisory.KeyOf(name), 1)
	require.NoError(t, theirs.Unlock(ctx))
	l := <-got
	requireHeldBy(t, l.Key(), l.PID())
	assert.NotEqual(t, mine.PID(), l.PID(), "the waiter waited on a session of its own")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, mine.Unlock(ctx))
	requireNoAcquired(t, m)
}
