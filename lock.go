package advisory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// A Lock is one held advisory lock. It pins one connection until Unlock, loss, or the
// Manager's Close. Its methods are safe for concurrent use by multiple goroutines.
type Lock struct {
	s    *session
	name string
}

// Key returns the lock's key.
func (l *Lock) Key() Key { return l.s.key }

// Name returns the name the lock was taken with, or "" for a raw key.
func (l *Lock) Name() string { return l.name }

// PID returns the process ID of the PostgreSQL backend that holds the lock: the pid
// column of its pg_locks row.
func (l *Lock) PID() uint32 { return l.s.pid }

// Done returns a channel that is closed when the lock ends: after Unlock, on loss, or when
// the Manager is closed. Read [Lock.Err] to tell which. It does not block.
func (l *Lock) Done() <-chan struct{} { return l.s.done }

// Err returns nil while the lock is held. After Done is closed it returns an error
// wrapping [ErrLockLost] if the lock was lost (connection terminated, server restarted,
// network failed, Manager closed), or [ErrNotHeld] after Unlock.
func (l *Lock) Err() error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	return l.s.err
}

// Unlock releases the lock and returns its connection to the pool. It blocks for one
// round trip; ctx governs that round trip.
//
// It returns nil when the server confirmed the release. If the lock had been lost, it
// returns the loss error (wrapping [ErrLockLost]): the caller's critical section may have
// overlapped another holder's. A second Unlock returns [ErrNotHeld]. On any other error
// (ctx ended, connection failed) the connection is closed, so the server frees the lock
// as the session ends. In every case the lock is no longer held by this Lock afterwards.
func (l *Lock) Unlock(ctx context.Context) error {
	err := l.s.release(ctx, ErrNotHeld)
	switch {
	case err == nil, errors.Is(err, ErrNotHeld), errors.Is(err, ErrLockLost):
		return err
	}
	return &opError{"unlock", describe(l.s.key, l.name), fmt.Errorf("release not confirmed, connection closed: %w", err)}
}

// String returns the key in decimal, as pg_advisory_lock takes it.
func (k Key) String() string { return strconv.FormatInt(int64(k), 10) }

// quote quotes a lock name for messages, eliding the middle of very long ones.
func quote(name string) string {
	if len(name) > 80 {
		name = name[:40] + "…" + name[len(name)-20:]
	}
	return strconv.Quote(name)
}

// Lock takes the lock with the given name, blocking until it is held or ctx ends. The
// wait happens on the server (pg_advisory_lock), with no polling. ctx governs getting a
// connection from the pool and the wait.
//
// If ctx ends first, Lock returns an error for which errors.Is(err, ctx.Err()) holds,
// promptly (the server is told to stop waiting with a CancelRequest), and the lock is not
// held: if the grant raced the cancel, Lock releases it before returning. If every pool
// connection stays in use until ctx ends, the error also wraps [ErrPoolExhausted].
// An invalid name returns an error wrapping [ErrInvalidKey]; a closed Manager, [ErrClosed].
//
// A second Lock of a name this process already holds through the Manager waits, like any
// other session's, until the first is released: locks are not reentrant across calls.
func (m *Manager) Lock(ctx context.Context, name string) (*Lock, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	return m.lock(ctx, KeyOf(name), name)
}

// LockKey is [Manager.Lock] for a raw 64-bit key (pg_advisory_lock(key)).
func (m *Manager) LockKey(ctx context.Context, key Key) (*Lock, error) {
	return m.lock(ctx, key, "")
}

func (m *Manager) lock(ctx context.Context, key Key, name string) (*Lock, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.active.Done()
	for attempt := 0; ; attempt++ {
		s, err := m.acquire(ctx, key, name, true)
		if err != nil {
			return nil, lockError("lock", key, name, err)
		}
		err = s.lock(ctx)
		if err == nil {
			return &Lock{s: s, name: name}, nil
		}
		s.end(true, ErrNotHeld)
		if attempt > 0 || !staleConn(ctx, err) {
			return nil, lockError("lock", key, name, err)
		}
	}
}

// staleConn reports whether err says a pooled connection was already dead when a
// statement was sent on it (the server restarted, say): nothing reached the server, so
// the call is tried once more on a fresh connection.
func staleConn(ctx context.Context, err error) bool {
	return ctx.Err() == nil && pgconn.SafeToRetry(err)
}

// TryLock takes the lock with the given name if no other session holds it, without
// waiting for it. If it is held elsewhere, TryLock returns a *[LockedError] wrapping
// [ErrLocked]. It does not wait for a pool connection either: if none is free and none can
// be opened, it returns an error wrapping [ErrPoolExhausted]. ctx governs connecting and
// the round trip; if ctx ends during the round trip the connection is closed and the lock
// is not held. Invalid names and a closed Manager fail as for [Manager.Lock].
func (m *Manager) TryLock(ctx context.Context, name string) (*Lock, error) {
	if err := ValidateName(name); err != nil {
		return nil, err
	}
	return m.tryLock(ctx, KeyOf(name), name)
}

// TryLockKey is [Manager.TryLock] for a raw 64-bit key (pg_try_advisory_lock(key)).
func (m *Manager) TryLockKey(ctx context.Context, key Key) (*Lock, error) {
	return m.tryLock(ctx, key, "")
}

func (m *Manager) tryLock(ctx context.Context, key Key, name string) (*Lock, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.active.Done()
	var ok bool
	for attempt := 0; ; attempt++ {
		s, err := m.acquire(ctx, key, name, false)
		if err != nil {
			return nil, lockError("try lock", key, name, err)
		}
		ok, err = s.tryLock(ctx)
		if err == nil && ok {
			return &Lock{s: s, name: name}, nil
		}
		s.end(true, ErrNotHeld)
		if err == nil || attempt > 0 || !staleConn(ctx, err) {
			return nil, tryLockResult(key, name, err)
		}
	}
}

func tryLockResult(key Key, name string, err error) error {
	switch {
	case err != nil:
		return lockError("try lock", key, name, err)
	}
	return &LockedError{Key: key, Name: name}
}

func lockError(op string, key Key, name string, err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	return &opError{op, describe(key, name), err}
}

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
