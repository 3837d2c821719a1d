package advisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgadvisory/advisory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUnlockTwiceAndAfterLoss(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.ErrorIs(t, l.Unlock(ctx), advisory.ErrNotHeld)

	l, err = m.Lock(ctx, t.Name())
	require.NoError(t, err)
	terminate(t, l.PID())
	<-l.Done()
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, advisory.ErrLockLost)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the server's reason stays reachable")
	assert.Equal(t, "57P01", pgErr.Code)
	require.ErrorIs(t, l.Unlock(ctx), advisory.ErrLockLost, "and stays the answer")
	requireNoAcquired(t, m)
}

func TestConcurrentUnlockReleasesOnce(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	errs := make(chan error, 8)
	for i := 0; i < cap(errs); i++ {
		go func() { errs <- l.Unlock(ctx) }()
	}
	var ok, notHeld int
	for i := 0; i < cap(errs); i++ {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case errors.Is(err, advisory.ErrNotHeld):
			notHeld++
		default:
			t.Fatalf("unexpected: %v", err)
		}
	}
	require.Equal(t, 1, ok)
	require.Equal(t, cap(errs)-1, notHeld)
	requireFree(t, l.Key())
	requireNoAcquired(t, m)
}

func TestUnlockWithEndedContextStillFreesTheLock(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	l, err := m.Lock(ctxT(t), t.Name())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, context.Canceled)
	<-l.Done()
	// The connection was closed instead: the server frees the lock as the session ends.
	eventually(t, 5*time.Second, func() bool { return len(lockRows(t, l.Key())) == 0 }, "the lock is freed")
	requireNoAcquired(t, m)
}

func TestProgrammerMisusePanics(t *testing.T) {
	t.Parallel()
	assert.Panics(t, func() { advisory.NewWithConfig(context.Background(), nil) })
	m := newManager(t, nil)
	assert.Panics(t, func() { m.Do(context.Background(), "x", nil) })
}

// TestUnlockRacingATerminationReportsTheLoss: the session is terminated just before
// Unlock. Whether the watcher or the unlock statement sees it first, Unlock must report
// the loss (the critical section may have overlapped another holder's), never a plain
// failure, and Err must agree.
func TestUnlockRacingATerminationReportsTheLoss(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	for i := 0; i < 30; i++ {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		terminate(t, l.PID())
		err = l.Unlock(ctx)
		require.ErrorIs(t, err, advisory.ErrLockLost, "attempt %d", i)
		require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
		requireNoAcquired(t, m)
	}
}
