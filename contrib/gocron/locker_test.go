package advgocron_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advgocron "github.com/pgadvisory/advisory/contrib/gocron"
	"github.com/pgadvisory/advisory/internal/leak"
)

func newLocker(t *testing.T, m *advisory.Manager, atLeast time.Duration) *advgocron.Locker {
	t.Helper()
	lk, err := advgocron.NewLocker(m, atLeast)
	require.NoError(t, err)
	return lk
}

func TestLockerSkipsWhenHeld(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	a, b := newLocker(t, newManager(t), 0), newLocker(t, newManager(t), 0)
	held, err := a.Lock(ctx, name)
	require.NoError(t, err)
	require.Len(t, holders(t, name), 1)
	_, err = b.Lock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked)
	_, err = a.Lock(ctx, name) // the same Locker: not reentrant, skips too
	require.ErrorIs(t, err, advisory.ErrLocked)
	require.NoError(t, held.Unlock(ctx))
	require.Empty(t, holders(t, name), "atLeast 0: released before Unlock returns")
	require.ErrorIs(t, held.Unlock(ctx), advisory.ErrNotHeld)
}

// backgroundHold is a lock taken by a Locker whose Unlock was called, its hold going on.
type backgroundHold struct {
	m        *advisory.Manager // lk's
	lk, late *advgocron.Locker // late: another Manager's, atLeast 0, a late replica
	start    time.Time         // when Lock was called
	pids     []uint32          // the holder's backend
	held     gocron.Lock
}

// holdInTheBackground takes name with a Locker of atLeast on a Manager of its own and
// calls the Lock's Unlock, which leaves the hold going on in the background.
func holdInTheBackground(t *testing.T, ctx context.Context, name string, atLeast time.Duration) backgroundHold {
	t.Helper()
	h := backgroundHold{m: newManager(t)}
	h.lk, h.late = newLocker(t, h.m, atLeast), newLocker(t, newManager(t), 0)
	h.start = time.Now()
	var err error
	h.held, err = h.lk.Lock(ctx, name)
	require.NoError(t, err)
	h.pids = holders(t, name)
	require.Len(t, h.pids, 1)
	require.NoError(t, h.held.Unlock(ctx))
	return h
}

// TestLockerHoldsAtLeast: Unlock returns at once, the lock stays held (pg_locks) until
// atLeast has passed since Lock, and a late replica's Lock fails meanwhile.
func TestLockerHoldsAtLeast(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	const atLeast = 1500 * time.Millisecond
	h := holdInTheBackground(t, ctx, name, atLeast)
	m, late, start, pids, held := h.m, h.late, h.start, h.pids, h.held
	require.Less(t, time.Since(start), atLeast, "Unlock blocked for the hold")
	_, err := late.Lock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked, "a late replica took the lock during the hold")
	require.Equal(t, pids, holders(t, name))
	require.ErrorIs(t, held.Unlock(ctx), advisory.ErrNotHeld)

	eventually(t, 30*time.Second, func() bool { return len(holders(t, name)) == 0 }, "released after the hold")
	held2 := time.Since(start)
	require.GreaterOrEqual(t, held2, atLeast, "released before atLeast")
	require.Eventually(t, func() bool { return m.Stat().AcquiredConns() == 0 }, 5*time.Second, time.Millisecond)
	t.Logf("held %v for atLeast %v", held2, atLeast)
}

// TestLockerHoldEndsOnLossAndClose: a hold in progress ends when the lock is lost or the
// Manager closed, and leaves no goroutine behind.
func TestLockerHoldEndsOnLossAndClose(t *testing.T) {
	ctx := ctxT(t)
	name := t.Name()
	m := newManager(t)
	before := runtime.NumGoroutine()
	lk := newLocker(t, m, time.Hour)

	held, err := lk.Lock(ctx, name)
	require.NoError(t, err)
	pid := holders(t, name)[0]
	require.NoError(t, held.Unlock(ctx))
	terminate(t, pid)
	leak.Goroutines(t, before)

	held, err = lk.Lock(ctx, name)
	require.NoError(t, err)
	require.NoError(t, held.Unlock(ctx))
	require.Len(t, holders(t, name), 1)
	m.Close()
	leak.Goroutines(t, before)
	eventually(t, 10*time.Second, func() bool { return len(holders(t, name)) == 0 }, "released on Close")
}

// TestLockerCloseKeepsTheHold: a replica shutting down right after it ran an occurrence
// (Close, then the Manager's Close, as the Locker's godoc says) keeps the lock for the
// rest of the hold: a late replica's Lock still fails meanwhile. Close returns once the
// hold is over; a Close whose ctx ends first says so and leaves the hold as it was; a
// Lock after Close fails with ErrClosed. Without Close, the Manager's Close frees the
// lock at once (the case a late replica's timer ran the same occurrence twice).
func TestLockerCloseKeepsTheHold(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	const atLeast = 1500 * time.Millisecond
	h := holdInTheBackground(t, ctx, name, atLeast)
	m, lk, late, start, pids := h.m, h.lk, h.late, h.start, h.pids

	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	err := lk.Close(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "1 locks not yet released")
	require.Equal(t, pids, holders(t, name), "a Close whose ctx ended changed the hold")
	_, err = lk.Lock(ctx, name+"-other")
	require.ErrorIs(t, err, advisory.ErrClosed)
	require.Empty(t, holders(t, name+"-other"))

	closed := make(chan time.Duration, 1)
	go func() {
		if err := lk.Close(ctx); err != nil {
			t.Errorf("Close: %v", err)
		}
		closed <- time.Since(start)
	}()
	_, err = late.Lock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked, "a late replica took the lock during the hold, while Close ran")
	took := <-closed
	require.GreaterOrEqual(t, took, atLeast, "Close returned before the hold ended")
	require.Empty(t, holders(t, name), "Close returned with the lock held")
	m.Close()

	// Without Close: the Manager's Close ends the hold at once.
	m2 := newManager(t)
	held, err := newLocker(t, m2, time.Hour).Lock(ctx, name)
	require.NoError(t, err)
	require.NoError(t, held.Unlock(ctx))
	m2.Close()
	eventually(t, 10*time.Second, func() bool { return len(holders(t, name)) == 0 }, "freed by the Manager's Close")
	t.Logf("Close returned %v after Lock, for atLeast %v", took, atLeast)
}

func TestLockerReportsLoss(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	m := newManager(t)
	lk := newLocker(t, m, time.Hour)
	held, err := lk.Lock(ctx, name)
	require.NoError(t, err)
	terminate(t, holders(t, name)[0])
	// The lost connection is destroyed once the loss is seen.
	eventually(t, 10*time.Second, func() bool { return m.Stat().AcquiredConns() == 0 }, "loss seen")
	require.ErrorIs(t, held.Unlock(ctx), advisory.ErrLockLost)
}

func TestLockerBadInput(t *testing.T) {
	t.Parallel()
	m := newManager(t)
	_, err := advgocron.NewLocker(m, -time.Second)
	require.ErrorIs(t, err, advisory.ErrInvalidOption)
	_, err = newLocker(t, m, 0).Lock(ctxT(t), "")
	require.ErrorIs(t, err, advisory.ErrInvalidKey)
	require.Panics(t, func() { advgocron.NewLocker(nil, 0) })
}
