package advisory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// Lead makes this process a leader candidate for the given name. It blocks in
// [Manager.Lock] until it holds the lock (it is leader), drains earlier holders' work as
// [Manager.Do] does, then runs fn with a context that is cancelled if the lock is lost
// (context.Cause then wraps [ErrLockLost]). When leadership is lost, Lead waits for fn to
// return and campaigns again. While it cannot reach the server it retries with a capped,
// jittered back-off (100 ms to 5 s).
//
// Lead returns when ctx ends (an error wrapping ctx.Err(); fn's context is cancelled and
// fn has returned), when fn returns while still leader (fn's error, nil included; the
// lock is released first), or on an error retrying cannot mend: an invalid name
// ([ErrInvalidKey]), a closed Manager ([ErrClosed]), a transaction-pooling proxy
// ([ErrPooler]), a drain that failed ([ErrWorkNotDrained]). fn must return once its
// context is cancelled. Whenever Lead returns, or fn panics (the lock is released before
// the panic goes on up the stack), the lock is not held.
func (m *Manager) Lead(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	if fn == nil {
		panic("advisory: Lead with a nil function")
	}
	backoff := 100 * time.Millisecond
	for {
		l, err := m.Lock(ctx, name)
		cerr := ctx.Err() // read once: ctx may end between two reads
		if err == nil && cerr != nil {
			// Granted just as ctx ended: release, do not start fn.
			unlockDetached(ctx, l)
		}
		switch {
		case cerr != nil:
			return fmt.Errorf("advisory: lead %s: %w", quote(name), cerr)
		case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrClosed), errors.Is(err, ErrPooler):
			return err
		case err != nil:
			if !sleepCtx(ctx, jitter(backoff)) {
				return fmt.Errorf("advisory: lead %s: %w (last error: %v)", quote(name), ctx.Err(), err)
			}
			backoff = min(2*backoff, 5*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		if err := drainOrUnlock(ctx, l); err != nil {
			if errors.Is(err, ErrLockLost) && ctx.Err() == nil {
				continue
			}
			return err
		}
		if lost, err := leadOnce(ctx, l, fn); !lost {
			return err
		}
	}
}

// leadOnce runs fn while l is held. It reports whether the lock was lost (then fn's error
// is dropped: the caller campaigns again); otherwise it releases the lock and returns fn's
// error.
func leadOnce(ctx context.Context, l *Lock, fn func(ctx context.Context) error) (lost bool, err error) {
	fnErr, uerr := runThenUnlock(ctx, l, fn)
	switch {
	case ctx.Err() != nil:
		return false, fmt.Errorf("advisory: lead %s: %w", quote(l.Name()), ctx.Err())
	case errors.Is(uerr, ErrLockLost):
		return true, nil
	}
	return false, fnErr
}

func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}

// sleepCtx sleeps d, or less if ctx ends first; it reports whether it slept the whole d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
