package advisory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TryDo runs fn under the lock with the given name if no other session holds it, for a
// job that every replica starts on the same schedule: one runs it, the others skip at
// once. It does not wait for the lock: if the lock is held elsewhere (or by another call
// of this Manager), TryDo returns ran == false and a nil error, without running fn.
//
// Otherwise it drains earlier holders' work as [Manager.Do] does (if that fails it
// returns ran == false and the drain's error), runs fn (ran == true) with a context derived from ctx that is also
// cancelled if the lock is lost (context.Cause then wraps [ErrLockLost]), and after fn
// returns it keeps holding the lock until atLeast has passed since the lock was taken,
// then unlocks. The hold is what makes a replica whose timer fires a little late (by less
// than atLeast) find the lock taken and skip the occurrence the first one already ran.
// Pick atLeast larger than the timer skew between replicas and smaller than the schedule's
// interval minus that skew; zero means no hold. Holding pins the lock's connection for
// that long.
//
// ctx governs the try, fn's context, and the hold: if ctx ends during the hold, the lock
// is released at once. The unlock is bounded by 5 s of its own, after which the
// connection is closed, which frees the lock. With ran == true, the error is fn's error,
// or an error wrapping [ErrLockLost] if the lock was lost before the hold ended (joined
// with fn's error, if any: a late replica may then run the occurrence again), or the
// unlock's error. With ran == false, a non-nil error is the try's or the drain's (server unreachable,
// [ErrPoolExhausted], [ErrInvalidKey], [ErrClosed]); a negative atLeast returns an error
// wrapping [ErrInvalidOption]. In every case the lock is not held when TryDo returns.
//
// If fn panics or calls runtime.Goexit, the lock is released at once, without the hold
// (as the process's death would release it), before the panic goes on up the stack.
//
// The lease is the session, so no "at most" bound is needed: a holder that dies loses
// the lock when its session ends. The limit that remains: a crash (or a panic, or ctx
// ending) right after fn frees the lock before atLeast has passed, and a replica whose
// timer fires after that runs the same occurrence again. Only a record of finished
// occurrences (a table) closes that gap. See docs/jobs.md.
func (m *Manager) TryDo(ctx context.Context, name string, atLeast time.Duration,
	fn func(ctx context.Context) error) (ran bool, err error) {
	if fn == nil {
		panic("advisory: TryDo with a nil function")
	}
	if atLeast < 0 {
		return false, fmt.Errorf("advisory: try-do %s: atLeast %v is negative: %w", quote(name), atLeast, ErrInvalidOption)
	}
	l, err := m.TryLock(ctx, name)
	switch {
	case errors.Is(err, ErrLocked):
		return false, nil
	case err != nil:
		return false, err
	}
	if err := drainOrUnlock(ctx, l); err != nil {
		return false, err
	}
	return true, doResult(runHoldUnlock(ctx, l, time.Now().Add(atLeast), fn))
}

// holdUntil returns at until, or earlier when l ends or ctx ends.
func holdUntil(ctx context.Context, l *Lock, until time.Time) {
	d := time.Until(until)
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-l.Done():
	case <-ctx.Done():
	}
}
