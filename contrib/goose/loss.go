package advgoose

import (
	"context"
	"errors"

	"github.com/pgadvisory/advisory"
)

// watcher is one live context of Locker.Context.
type watcher struct {
	cancel context.CancelCauseFunc
}

// Context returns a copy of ctx that is also cancelled if a lock this Locker holds is
// lost while the copy lives, with the loss (wrapping [advisory.ErrLockLost]) as its
// context.Cause. goose runs the migrations with the ctx given to Provider.Up (UpTo,
// Down, ...); pass it this copy, so that a loss stops the migration in flight: goose's
// statements are cancelled and a transactional migration rolls back. goose's own
// lockers never stop the migration. The copy may be made before Up takes the lock. It
// does not block; call the returned cancel when done, as for context.WithCancel.
//
// How fast the loss is heard is the Manager's: at once for a terminated session or a
// server shutdown, within its keepalive bounds on a silent partition (see the advisory
// package's docs/guarantees.md).
func (lk *Locker) Context(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancelCause(ctx)
	w := &watcher{cancel: cancel}
	lk.mu.Lock()
	lk.watch[w] = struct{}{}
	h := lk.held
	lk.mu.Unlock()
	context.AfterFunc(c, func() { lk.forget(w) })
	if h != nil {
		if err := h.l.Err(); errors.Is(err, advisory.ErrLockLost) {
			cancel(err)
		}
	}
	return c, func() { cancel(nil) }
}

// forget drops a context that has ended.
func (lk *Locker) forget(w *watcher) {
	lk.mu.Lock()
	delete(lk.watch, w)
	lk.mu.Unlock()
}

// watchLoss cancels the live contexts of Context if l is lost. It returns when l ends,
// which every holding does (Unlock, loss, or the Manager's Close).
func (lk *Locker) watchLoss(l *advisory.Lock) {
	<-l.Done()
	err := l.Err()
	if !errors.Is(err, advisory.ErrLockLost) {
		return
	}
	lk.mu.Lock()
	ws := make([]*watcher, 0, len(lk.watch))
	for w := range lk.watch {
		ws = append(ws, w)
	}
	lk.mu.Unlock()
	for _, w := range ws {
		w.cancel(err)
	}
}
