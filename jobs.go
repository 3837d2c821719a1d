package advisory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// TryDo runs fn under the lock with the given name if no other session holds it, for a job
// every replica starts on the same schedule: one runs it, the others skip at once
// (ran == false, nil error, fn not run). It drains earlier holders' work as [Manager.Do]
// does, runs fn with a ctx that is also cancelled if the lock is lost, and then keeps the
// lock until atLeast has passed since it was taken, so that a replica whose timer fires a
// little late skips too (pick atLeast above the timer skew, below the interval minus it).
//
// ctx governs the try, fn's ctx and the hold: ended during the hold, it releases the lock
// at once, so at shutdown cancel it only past a budget (a replica whose timer fires after
// the release runs the occurrence again). With ran == true the error is fn's, or wraps
// [ErrLockLost] if the lock was lost before the hold ended, or is the unlock's; with
// ran == false it is the try's or the drain's. A negative atLeast wraps
// [ErrInvalidOption]. Whatever happens, and if fn panics, TryDo holds nothing when it
// returns. docs/jobs.md has the full contract and the limit that remains. Under a holding
// of the same lock in ctx, TryDo re-enters it (see [Manager]): fn runs, and nothing is
// held after it by TryDo (the holding's own end decides).
func (m *Manager) TryDo(ctx context.Context, name string, atLeast time.Duration,
	fn func(ctx context.Context) error) (ran bool, err error) {
	if fn == nil {
		panic("advisory: TryDo with a nil function")
	}
	if atLeast < 0 {
		return false, fmt.Errorf("%w: try-do %s: atLeast %v is negative", ErrInvalidOption, quote(name), atLeast)
	}
	l, err := m.lockFor(ctx, name, modeTry, !m.set.noDrain)
	switch {
	case errors.Is(err, ErrLocked):
		return false, nil
	case err != nil:
		return false, err
	}
	if err := drainOrUnlock(ctx, l); err != nil {
		return false, err
	}
	until := time.Now().Add(atLeast)
	if l.Reentered() { // its Unlock releases nothing: the holding it re-entered decides
		until = time.Time{}
	}
	return true, doResult(runHoldUnlock(ctx, l, until, fn))
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
