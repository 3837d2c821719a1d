package advgoose

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/pressly/goose/v3/lock"

	"github.com/pgadvisory/advisory"
)

// unlockTimeout bounds the statements the adapter runs after the caller's ctx may have
// ended (goose detaches its unlock ctx; locktesting unlocks with an expired one). Past it
// the lock's connection is closed, which frees the lock too.
const unlockTimeout = 5 * time.Second

// Locker is a goose lock.Locker and lock.SessionLocker backed by one advisory lock, taken
// through an [advisory.Manager] (see the package doc for which to install). A Locker holds
// at most one lock at a time: a second Lock waits, bounded by its ctx, until the first is
// unlocked, so Providers of one process may share a Locker. A Locker is safe for
// concurrent use by multiple goroutines.
type Locker struct {
	m     *advisory.Manager
	name  string
	drain bool
	slot  chan struct{} // full while a holding is current

	mu    sync.Mutex
	held  *holding
	watch map[*watcher]struct{} // the live contexts of Locker.Context
}

var (
	_ lock.Locker        = (*Locker)(nil)
	_ lock.SessionLocker = (*Locker)(nil)
)

// An Option configures a Locker.
type Option func(*Locker)

// WithoutDrain makes Lock and SessionLock return as soon as the lock is held, without
// draining earlier holders' tagged sessions first ([advisory.Lock.Drain]). By default
// they drain.
func WithoutDrain() Option { return func(lk *Locker) { lk.drain = false } }

// New returns a Locker that takes the advisory lock name with m. It does not block; an
// invalid name is reported by the first Lock. m must stay open while goose runs: closing
// it ends the holding as a loss. New panics if m is nil.
func New(m *advisory.Manager, name string, opts ...Option) *Locker {
	if m == nil {
		panic("advgoose: New with a nil Manager")
	}
	lk := &Locker{m: m, name: name, drain: true, slot: make(chan struct{}, 1), watch: map[*watcher]struct{}{}}
	for _, o := range opts {
		o(lk)
	}
	return lk
}

// Lock takes the lock for a goose Provider installed with goose.WithLocker: it blocks
// until the lock is held (waiting on the server, not polling), then drains earlier
// holders' tagged sessions (unless [WithoutDrain]). ctx governs all of it; on any error
// nothing is held and the error wraps ctx.Err(), [advisory.ErrWorkNotDrained] or the
// Manager's error. db is not used: the lock lives on a connection of the Manager, and
// goose's own connections cannot be tagged through this interface (see the package doc).
func (lk *Locker) Lock(ctx context.Context, db *sql.DB) error {
	return lk.take(ctx, nil)
}

// Unlock releases the lock taken by Lock. It is not governed by ctx's end (goose detaches
// it): the release is bounded by 5 s, after which the lock's connection is closed, which
// frees the lock as well. It returns an error wrapping [advisory.ErrLockLost] if the lock
// was lost while held (the migrations may have overlapped another holder's), and one
// wrapping [advisory.ErrNotHeld] when nothing taken by Lock is held. db is not used.
func (lk *Locker) Unlock(ctx context.Context, db *sql.DB) error {
	return lk.release(ctx, nil)
}

// Held returns the advisory lock the Locker holds now, or nil. Use it for what the
// adapter cannot do through goose's interfaces, such as tagging a Go migration's own
// connections ([advisory.Lock.WorkConnString]) or taking a fencing token. It does not
// block.
func (lk *Locker) Held() *advisory.Lock {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.held == nil {
		return nil
	}
	return lk.held.l
}

// holding is one lock taken by Lock or SessionLock.
type holding struct {
	l    *advisory.Lock
	conn *sql.Conn // SessionLock's connection, tagged for the holding; nil for Lock
	app  string    // conn's application_name before it was tagged
	// pooled: the Manager goes through a transaction pooler, where conn is not a server
	// session of its own and is left untagged (see the package doc).
	pooled bool
}

// take waits for the Locker's slot, takes the lock and prepares the holding.
func (lk *Locker) take(ctx context.Context, conn *sql.Conn) error {
	select {
	case lk.slot <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("advgoose: lock %q: waiting for this Locker's earlier holding: %w", lk.name, ctx.Err())
	}
	h, err := lk.acquire(ctx, conn)
	if err != nil {
		<-lk.slot
		return err
	}
	lk.mu.Lock()
	lk.held = h
	lk.mu.Unlock()
	go lk.watchLoss(h.l)
	return nil
}

// acquire takes the lock, drains and tags conn; on error nothing is held.
func (lk *Locker) acquire(ctx context.Context, conn *sql.Conn) (*holding, error) {
	l, err := lk.m.Lock(ctx, lk.name)
	if err != nil {
		return nil, err
	}
	h := &holding{l: l, conn: conn, pooled: lk.m.Bounds().TransactionPooler}
	if err := lk.prepare(ctx, h); err != nil {
		return nil, errors.Join(err, unlockDetached(ctx, l))
	}
	return h, nil
}

// prepare drains earlier holders' work, then tags SessionLock's connection.
func (lk *Locker) prepare(ctx context.Context, h *holding) error {
	if lk.drain {
		if _, err := h.l.Drain(ctx); err != nil {
			return err
		}
	}
	if h.conn == nil || h.pooled {
		return nil
	}
	return h.tag(ctx)
}

// release ends the holding taken with conn (nil: by Lock).
func (lk *Locker) release(ctx context.Context, conn *sql.Conn) error {
	lk.mu.Lock()
	h := lk.held
	if h != nil && h.conn == conn {
		lk.held = nil
	}
	lk.mu.Unlock()
	if h == nil || h.conn != conn {
		return fmt.Errorf("advgoose: unlock %q: %w", lk.name, advisory.ErrNotHeld)
	}
	defer func() { <-lk.slot }()
	var terr error
	if conn != nil && !h.pooled {
		terr = h.untag(ctx)
	}
	// The loss first: it says the migrations may have overlapped another holder's.
	return errors.Join(unlockDetached(ctx, h.l), terr)
}

// unlockDetached unlocks with a ctx of its own: the caller's may have ended.
func unlockDetached(ctx context.Context, l *advisory.Lock) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	return l.Unlock(uctx)
}
