package advisory_test

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/leak"
)

func TestSemaphoreRefusesBadLimitsAndNames(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	for _, limit := range []int{0, -1, advisory.MaxSemaphoreLimit + 1} {
		_, err := m.Semaphore(t.Name(), limit)
		assert.ErrorIs(t, err, advisory.ErrInvalidOption, "limit %d", limit)
	}
	for _, name := range []string{"", "a\x00b", "\xff", strings.Repeat("n", advisory.MaxNameLen)} {
		_, err := m.Semaphore(name, 2)
		assert.ErrorIs(t, err, advisory.ErrInvalidKey, "name %q", name)
	}
	s, err := m.Semaphore(t.Name(), advisory.MaxSemaphoreLimit)
	require.NoError(t, err)
	assert.Len(t, s.SlotKeys(), advisory.MaxSemaphoreLimit)
}

// semaphoreRows returns the pg_locks rows of every slot of s.
func semaphoreRows(t testing.TB, s *advisory.Semaphore) (held, waiting []lockRow) {
	t.Helper()
	for _, k := range s.SlotKeys() {
		for _, r := range lockRows(t, k) {
			if r.Granted {
				held = append(held, r)
			} else {
				waiting = append(waiting, r)
			}
		}
	}
	return held, waiting
}

func TestSemaphoreSlotKeysMatchPsql(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithNamespace("ns"))
	ctx := ctxT(t)
	s, err := m.Semaphore("workers", 3)
	require.NoError(t, err)
	assert.Equal(t, "ns:workers", s.Name())
	for i, k := range s.SlotKeys() {
		var want int64
		require.NoError(t, admin.QueryRow(ctx, "SELECT hashtextextended($1, 0)", fmt.Sprintf("ns:workers#slot/%d", i)).Scan(&want))
		assert.Equal(t, advisory.Key(want), k, "slot %d", i)
	}
	var want int64
	require.NoError(t, admin.QueryRow(ctx, "SELECT hashtextextended('ns:workers#turnstile', 0)").Scan(&want))
	assert.Equal(t, advisory.Key(want), s.TurnstileKey())

	// A slot taken by hand in psql counts against the limit.
	conn, err := admin.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var ok bool
	for i := range 3 {
		require.NoError(t, conn.QueryRow(ctx, fmt.Sprintf("SELECT pg_try_advisory_lock(hashtextextended('ns:workers#slot/%d', 0))", i)).Scan(&ok))
		require.True(t, ok)
	}
	_, err = s.TryAcquire(ctx)
	require.ErrorIs(t, err, advisory.ErrLocked)
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_advisory_unlock(hashtextextended('ns:workers#slot/1', 0))").Scan(&ok))
	l, err := s.TryAcquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, "ns:workers#slot/1", l.Name())
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_advisory_unlock_all() IS NULL").Scan(&ok))
}

func TestSemaphoreTryAcquireWhenFull(t *testing.T) {
	t.Parallel()
	m1, m2 := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	s1, err := m1.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	s2, err := m2.Semaphore(t.Name(), 2)
	require.NoError(t, err)

	a, err := s1.TryAcquire(ctx)
	require.NoError(t, err)
	b, err := s2.TryAcquire(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, a.Key(), b.Key(), "two holders, two slots")
	held, _ := semaphoreRows(t, s1)
	assert.ElementsMatch(t, []lockRow{{a.PID(), true}, {b.PID(), true}}, held)

	_, err = s1.TryAcquire(ctx)
	require.ErrorIs(t, err, advisory.ErrLocked)
	_, err = s2.TryAcquire(ctx)
	require.ErrorIs(t, err, advisory.ErrLocked)
	assert.EqualValues(t, 1, m1.Stat().AcquiredConns(), "a failed TryAcquire pins nothing")

	hs, err := s1.Holders(ctx)
	require.NoError(t, err)
	require.Len(t, hs, 2)
	byPID := map[uint32]advisory.Holder{hs[0].PID: hs[0], hs[1].PID: hs[1]}
	assert.Equal(t, a.Name(), byPID[a.PID()].Name)
	assert.Equal(t, b.Name(), byPID[b.PID()].Name)
	assert.True(t, byPID[a.PID()].Granted && byPID[b.PID()].Granted)

	require.NoError(t, a.Unlock(ctx))
	c, err := s2.TryAcquire(ctx)
	require.NoError(t, err)
	assert.Equal(t, a.Key(), c.Key(), "the freed slot")
	require.NoError(t, b.Unlock(ctx))
	require.NoError(t, c.Unlock(ctx))
	requireNoAcquired(t, m1)
	requireNoAcquired(t, m2)
	held, waiting := semaphoreRows(t, s1)
	assert.Empty(t, append(held, waiting...))
}

func TestSemaphoreOnClosedManager(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	s, err := m.Semaphore(t.Name(), 1)
	require.NoError(t, err)
	ctx := ctxT(t)
	l, err := s.Acquire(ctx)
	require.NoError(t, err)
	waiter := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx)
		waiter <- err
	}()
	waitForWaiters(t, s.SlotKeys()[0], 1)
	m.Close()
	assert.ErrorIs(t, <-waiter, advisory.ErrClosed, "an Acquire waiting when Close began")
	assert.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	_, err = s.Acquire(ctx)
	assert.ErrorIs(t, err, advisory.ErrClosed)
	_, err = s.TryAcquire(ctx)
	assert.ErrorIs(t, err, advisory.ErrClosed)
	_, err = m.Semaphore(t.Name(), 1)
	assert.ErrorIs(t, err, advisory.ErrClosed)
}

// TestSemaphoreAcquireWaitsForAFreedSlot: a waiter on a full semaphore gets the slot a
// holder frees, whether the holder is in its own process (wake-up) or another Manager
// (the slot waited for on the server, or a re-check).
func TestSemaphoreAcquireWaitsForAFreedSlot(t *testing.T) {
	t.Parallel()
	m1, m2 := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	s1, err := m1.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	s2, err := m2.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	for round, holder := range []*advisory.Semaphore{s1, s2, s2} {
		a, err := holder.Acquire(ctx)
		require.NoError(t, err)
		b, err := holder.Acquire(ctx)
		require.NoError(t, err)
		got := make(chan *advisory.Lock, 1)
		go func() {
			l, err := s1.Acquire(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		_, waiting := semaphoreRows(t, s1)
		eventually(t, 10*time.Second, func() bool { _, waiting = semaphoreRows(t, s1); return len(waiting) == 1 }, "a waiter on a slot")
		// Round 2 frees the slot the waiter waits for; rounds 0 and 1, the other one.
		free, keep := a, b
		if (lockRowsKey(t, a.Key(), false) == 1) != (round == 2) {
			free, keep = b, a
		}
		start := time.Now()
		require.NoError(t, free.Unlock(ctx))
		l := <-got
		t.Logf("round %d: slot handed over %v after Unlock", round, time.Since(start))
		assert.Equal(t, free.Key(), l.Key())
		requireHeldBy(t, l.Key(), l.PID())
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, keep.Unlock(ctx))
	}
	requireNoAcquired(t, m1)
	requireNoAcquired(t, m2)
}

// lockRowsKey counts key's pg_locks rows with the given granted state.
func lockRowsKey(t testing.TB, key advisory.Key, granted bool) int {
	n := 0
	for _, r := range lockRows(t, key) {
		if r.Granted == granted {
			n++
		}
	}
	return n
}

// TestSemaphoreLeavesNoGoroutines: waits, wake-ups, NOTIFYs, cancels and a Close with a
// slot held leave nothing running.
func TestSemaphoreLeavesNoGoroutines(t *testing.T) {
	// Not parallel: it counts the process's goroutines.
	ctx := ctxT(t)
	dsn(t)
	time.Sleep(50 * time.Millisecond)
	before := runtime.NumGoroutine()
	for range 2 {
		m, err := advisory.New(ctx, dsn(t))
		require.NoError(t, err)
		s, err := m.Semaphore(t.Name(), 1)
		require.NoError(t, err)
		l, err := s.Acquire(ctx)
		require.NoError(t, err)
		got := make(chan *advisory.Lock)
		go func() {
			l, err := s.Acquire(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		waitForWaiters(t, s.SlotKeys()[0], 1)
		require.NoError(t, l.Unlock(ctx))
		l = <-got
		cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err = s.Acquire(cctx)
		cancel()
		require.ErrorIs(t, err, context.DeadlineExceeded)
		_, err = s.TryAcquire(ctx)
		require.ErrorIs(t, err, advisory.ErrLocked)
		m.Close() // with l held
		assert.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	}
	leak.Goroutines(t, before)
}
