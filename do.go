package advisory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do runs fn while holding the lock with the given name: it blocks in [Manager.Lock] until
// the lock is held or ctx ends, drains earlier holders' work ([Lock.Drain], unless
// [WithoutDrain]; if that fails it unlocks and returns its error without calling fn), runs
// fn, then unlocks. fn's
// connections should carry the holding's tag: see [LockFromContext]. fn's ctx is derived from ctx and is
// also cancelled if the lock is lost; context.Cause(fnCtx) then wraps [ErrLockLost], and
// so does Do's error (together with fn's own error, if any). Otherwise Do returns fn's
// error, or the error of Lock or Unlock. The unlock is not governed by ctx: it is bounded
// by 5 s, after which the connection is closed, which frees the lock.
//
// If fn panics, the lock is released (as above) before the panic continues up the stack,
// so a caller that recovers (net/http does) leaves nothing held. The same holds if fn
// calls runtime.Goexit.
//
// With a ctx that carries a holding of the same lock (fn's ctx of an outer Do, say), Do
// re-enters it (see [Manager]): fn runs at once, under a re-entered Lock, and Do's end
// releases nothing; the outer holding stays until its own end.
func (m *Manager) Do(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	if fn == nil {
		panic("advisory: Do with a nil function")
	}
	l, err := m.lockFor(ctx, name, modeLock, !m.set.noDrain)
	if err != nil {
		return err
	}
	if err := drainOrUnlock(ctx, l); err != nil {
		return err
	}
	return doResult(runThenUnlock(ctx, l, fn))
}

// drainOrUnlock drains earlier holders' work (see Lock.Drain) before fn runs; if that
// fails, it unlocks and returns the error, with a loss first.
func drainOrUnlock(ctx context.Context, l *Lock) error {
	if l.s.m.set.noDrain || l.Reentered() { // a re-entered holding was drained when it was taken
		return nil
	}
	_, err := l.Drain(ctx)
	if err == nil {
		return nil
	}
	uerr := unlockDetached(ctx, l)
	if errors.Is(err, ErrLockLost) || errors.Is(uerr, ErrLockLost) {
		return doResult(nil, errors.Join(err, uerr))
	}
	return err
}

// doResult is the error of Do, DoTx and TryDo from fn's and Unlock's: a loss first, since the
// caller's critical section may have overlapped another holder's.
func doResult(fnErr, uerr error) error {
	switch {
	case errors.Is(uerr, ErrLockLost) && fnErr != nil:
		return fmt.Errorf("%w (and the function failed: %w)", uerr, fnErr)
	case errors.Is(uerr, ErrLockLost):
		return uerr
	case fnErr != nil:
		return fnErr
	}
	return uerr
}

// cleanupTimeout bounds the statements the library runs on its own behalf after the
// caller's ctx has ended (reconciling a cancelled wait, Close, Do's unlock).
const cleanupTimeout = 5 * time.Second

// runHolding runs fn with a context derived from ctx that is also cancelled, with the
// loss as its cause, if l is lost, and that carries l (see LockFromContext).
func runHolding(ctx context.Context, l *Lock, fn func(ctx context.Context) error) error {
	fnCtx, cancel := context.WithCancelCause(ContextWithLock(ctx, l))
	defer cancel(nil)
	go func() {
		select {
		case <-l.Done():
			cancel(l.Err())
		case <-fnCtx.Done():
		}
	}()
	return fn(fnCtx)
}

// runThenUnlock runs fn while l is held (see runHolding) and then unlocks l, also when fn
// panics or calls runtime.Goexit: the deferred unlock runs while the panic unwinds, and
// the panic goes on unchanged.
func runThenUnlock(ctx context.Context, l *Lock, fn func(ctx context.Context) error) (fnErr, uerr error) {
	return runHoldUnlock(ctx, l, time.Time{}, fn)
}

// runHoldUnlock is runThenUnlock that, after fn returns, keeps holding l until the time
// until (see holdUntil; the zero time: not at all). A panic or runtime.Goexit in fn
// unlocks at once, without the hold.
func runHoldUnlock(ctx context.Context, l *Lock, until time.Time, fn func(ctx context.Context) error) (fnErr, uerr error) {
	returned := false
	defer func() {
		if !returned {
			unlockDetached(ctx, l)
		}
	}()
	fnErr = runHolding(ctx, l, fn)
	returned = true
	holdUntil(ctx, l, until)
	return fnErr, unlockDetached(ctx, l)
}

// unlockDetached unlocks with a context of its own, bounded by cleanupTimeout: the
// caller's may have ended.
func unlockDetached(ctx context.Context, l *Lock) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	return l.Unlock(uctx)
}
