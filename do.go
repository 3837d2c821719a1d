package advisory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Do runs fn while holding the lock with the given name: it blocks in [Manager.Lock] until
// the lock is held or ctx ends, runs fn, then unlocks. fn's ctx is derived from ctx and is
// also cancelled if the lock is lost; context.Cause(fnCtx) then wraps [ErrLockLost], and
// so does Do's error (together with fn's own error, if any). Otherwise Do returns fn's
// error, or the error of Lock or Unlock. The unlock is not governed by ctx: it is bounded
// by 5 s, after which the connection is closed, which frees the lock.
func (m *Manager) Do(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	if fn == nil {
		panic("advisory: Do with a nil function")
	}
	l, err := m.Lock(ctx, name)
	if err != nil {
		return err
	}
	fnCtx, cancel := context.WithCancelCause(ctx)
	go func() {
		select {
		case <-l.Done():
			cancel(l.Err())
		case <-fnCtx.Done():
		}
	}()
	fnErr := fn(fnCtx)
	cancel(nil)
	uctx, ucancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer ucancel()
	uerr := l.Unlock(uctx)
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
