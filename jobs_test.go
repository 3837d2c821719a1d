package advisory_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestTryDoOneOfManyRuns: replicas firing the same occurrence together; one runs, the
// others skip at once (the runner's fn does not return until they have skipped).
func TestTryDoOneOfManyRuns(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	replicas := []*advisory.Manager{newManager(t, nil), newManager(t, nil), newManager(t, nil)}
	var skipped sync.WaitGroup
	skipped.Add(len(replicas) - 1)
	allSkipped := make(chan struct{})
	go func() { skipped.Wait(); close(allSkipped) }()

	var mu sync.Mutex
	runs := 0
	var wg sync.WaitGroup
	for _, m := range replicas {
		wg.Go(func() {
			ran, err := m.TryDo(ctx, name, 0, func(ctx context.Context) error {
				mu.Lock()
				runs++
				mu.Unlock()
				select { // hold until every other replica has tried and skipped
				case <-allSkipped:
				case <-ctx.Done():
				}
				return nil
			})
			assert.NoError(t, err)
			if !ran {
				skipped.Done()
			}
		})
	}
	wg.Wait()
	require.Equal(t, 1, runs, "replicas that ran the occurrence")
	requireFree(t, key)
	for _, m := range replicas {
		requireNoAcquired(t, m)
	}
}

// TestTryDoSkipsWhenHeld: a held lock (another Manager, or this one) means skip: no run,
// no error, the holder keeps it.
func TestTryDoSkipsWhenHeld(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	m, other := newManager(t, nil), newManager(t, nil)
	for _, holder := range []*advisory.Manager{other, m} {
		l, err := holder.TryLock(ctx, name)
		require.NoError(t, err)
		ran, err := m.TryDo(ctx, name, time.Minute, func(context.Context) error {
			t.Error("fn ran while the lock was held")
			return nil
		})
		require.NoError(t, err)
		require.False(t, ran)
		requireHeldBy(t, key, l.PID())
		require.NoError(t, l.Unlock(ctx))
	}
	requireFree(t, key)
	requireNoAcquired(t, m)
}

// TestTryDoHoldsAtLeast: after fn returns, the lock stays held (pg_locks) until atLeast
// has passed since it was taken, so a late replica skips; then it is released.
func TestTryDoHoldsAtLeast(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	m, late := newManager(t, nil), newManager(t, nil)
	const atLeast = 1500 * time.Millisecond
	fnDone := make(chan uint32, 1)
	type result struct {
		ran bool
		err error
	}
	res := make(chan result, 1)
	start := time.Now()
	go func() {
		ran, err := m.TryDo(ctx, name, atLeast, func(context.Context) error {
			rows := lockRows(t, key)
			if assert.Len(t, rows, 1) {
				fnDone <- rows[0].PID
			}
			return nil
		})
		res <- result{ran, err}
	}()
	pid := <-fnDone
	// fn has returned (or is returning): the late replica finds the lock still held.
	ran, err := late.TryDo(ctx, name, 0, func(context.Context) error {
		t.Error("a late replica ran the occurrence during the hold")
		return nil
	})
	require.NoError(t, err)
	require.False(t, ran)
	requireHeldBy(t, key, pid)

	r := <-res
	elapsed := time.Since(start)
	require.NoError(t, r.err)
	require.True(t, r.ran)
	require.GreaterOrEqual(t, elapsed, atLeast, "TryDo returned before atLeast")
	requireFree(t, key)
	requireNoAcquired(t, m)
	t.Logf("TryDo held %v for atLeast %v", elapsed, atLeast)
}

// TestTryDoCancelsOnLoss: a terminated session cancels fn's ctx with the loss as cause,
// and TryDo reports the loss with ran == true.
func TestTryDoCancelsOnLoss(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	m := newManager(t, nil)
	ran, err := m.TryDo(ctx, name, time.Hour, func(fctx context.Context) error {
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
	require.True(t, ran)
	require.ErrorIs(t, err, advisory.ErrLockLost)
	require.ErrorIs(t, err, context.Canceled, "fn's own error is kept")
	requireNoAcquired(t, m)
}

// TestTryDoHoldEnds: loss during the hold, and ctx ending during the hold, end it at once
// (well before an atLeast of an hour), and the lock is not held afterwards.
func TestTryDoHoldEnds(t *testing.T) {
	t.Parallel()
	name := t.Name()
	key := advisory.KeyOf(name)
	m := newManager(t, nil)

	// Loss: fn finished, the hold was cut short: ErrLockLost with ran == true.
	var pid uint32
	returned := make(chan struct{})
	go func() {
		<-returned // fn has returned: the terminate lands in the hold
		terminate(t, pid)
	}()
	ran, err := m.TryDo(ctxT(t), name, time.Hour, func(context.Context) error {
		defer close(returned)
		pid = lockRows(t, key)[0].PID
		return nil
	})
	require.True(t, ran)
	require.ErrorIs(t, err, advisory.ErrLockLost)
	requireNoAcquired(t, m)
	// The holder is told before the terminated backend has released the lock (see
	// guarantees.md): wait for the release, or the next TryDo may find it still held.
	eventually(t, 10*time.Second, func() bool { return len(lockRows(t, key)) == 0 },
		"the terminated backend released the lock")

	// ctx ends during the hold: released at once, fn's result (nil) returned.
	// Cancelled once fn runs: not earlier, when the cancel could land on the try itself.
	ctx, cancel := context.WithCancel(ctxT(t))
	inFn := make(chan struct{})
	go func() {
		<-inFn
		cancel()
	}()
	ran, err = m.TryDo(ctx, name, time.Hour, func(context.Context) error { close(inFn); return nil })
	require.True(t, ran)
	require.NoError(t, err)
	requireFree(t, key)
	requireNoAcquired(t, m)
}

// TestTryDoPanicReleasesAtOnce: a panic in fn releases the lock without the hold, before
// the panic goes on.
func TestTryDoPanicReleasesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	m := newManager(t, nil)
	start := time.Now()
	var recovered any
	func() {
		defer func() { recovered = recover() }()
		m.TryDo(ctx, name, time.Hour, func(context.Context) error { panic("boom") })
	}()
	require.Equal(t, "boom", recovered)
	require.Less(t, time.Since(start), 30*time.Second, "the panic waited for the hold")
	requireFree(t, key)
	requireNoAcquired(t, m)
}

func TestTryDoBadInput(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := newManager(t, nil)
	never := func(context.Context) error { return errors.New("must not run") }
	ran, err := m.TryDo(ctx, t.Name(), -time.Second, never)
	require.False(t, ran)
	require.ErrorIs(t, err, advisory.ErrInvalidOption)
	ran, err = m.TryDo(ctx, "", time.Second, never)
	require.False(t, ran)
	require.ErrorIs(t, err, advisory.ErrInvalidKey)
	require.PanicsWithValue(t, "advisory: TryDo with a nil function", func() {
		m.TryDo(ctx, t.Name(), 0, nil)
	})
	m.Close()
	ran, err = m.TryDo(ctx, t.Name(), 0, never)
	require.False(t, ran)
	require.ErrorIs(t, err, advisory.ErrClosed)
}
