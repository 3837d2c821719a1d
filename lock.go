package advisory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory/internal/sockfd"
)

// A Lock is one held advisory lock. It pins one connection until Unlock, loss, or the
// Manager's Close. Its methods are safe for concurrent use by multiple goroutines.
type Lock struct {
	s    *pin
	name string
}

// Key returns the lock's key.
func (l *Lock) Key() Key { return l.s.key }

// Name returns the name the lock was taken with, or "" for a raw key.
func (l *Lock) Name() string { return l.name }

// Shared reports whether the lock is held in shared mode.
func (l *Lock) Shared() bool { return l.s.shared }

// PID returns the process ID of the PostgreSQL backend that holds the lock: the pid
// column of its pg_locks row.
func (l *Lock) PID() uint32 { return l.s.pid }

// Done returns a channel that is closed when the lock ends: after Unlock, on loss, or when
// the Manager is closed. Read [Lock.Err] to tell which. It does not block. A loss during
// [Lock.BeginFunc] closes it at once; the connection then goes back when BeginFunc returns.
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
// round trip; ctx governs that round trip, and waiting for a [Lock.BeginFunc] in progress
// on the lock (if ctx ends first, the lock stays held and the error wraps ctx.Err()). A
// slot of [Semaphore.Acquire] may first wait, bounded by ctx, for the end of the wait
// that Acquire cancelled on finding it.
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
	return &opError{"unlock", describe(l.s.key, l.name, l.s.pair), fmt.Errorf("release not confirmed, connection closed: %w", err)}
}

// File returns a duplicate of the lock connection's socket descriptor, for a child
// process to inherit (os/exec.Cmd.ExtraFiles), as flock(1) hands its lock descriptor to
// its command: the server keeps a session, and so its lock, until every process holding
// the socket has exited or the lock is released. A supervisor that is killed while its
// child runs then cannot lose the lock to another holder before the child is gone too
// (pair it with a parent-death signal, so that the child does not outlive it).
//
// Once File has been called, the lock's connection is closed when the lock ends, never
// returned to the pool. The descriptor is close-on-exec until passed through
// ExtraFiles; the caller must close the file once the child has started. The child must
// never read from or write to it. It
// does not block. It returns an error wrapping [ErrNotHeld] or [ErrLockLost] if the lock
// has ended, and an error on a platform or connection without a socket descriptor
// (Linux with TCP or a Unix socket always has one).
func (l *Lock) File() (*os.File, error) {
	if err := l.Err(); err != nil {
		return nil, err
	}
	// The runtime pins the descriptor while sockfd.Dup works on it, so a concurrent close
	// (a watcher finding the connection dead) cannot hand us a reused number.
	fd, err := sockfd.Dup(l.s.pg.Conn())
	if err != nil {
		return nil, fmt.Errorf("advisory: duplicate the lock's socket: %w", err)
	}
	// The socket has left the library's hands: a connection the pool handed out again
	// would carry a later, unrelated lock on a session that a child process keeps alive.
	l.s.retire.Store(true)
	if err := l.Err(); err != nil { // ended meanwhile: the copy would hold nothing
		sockfd.Close(fd)
		return nil, err
	}
	return os.NewFile(uintptr(fd), "advisory-lock-"+l.Key().String()), nil
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

// target is what a Lock call asks for: a key, the name it came from ("" for a raw key),
// and the mode.
type target struct {
	key    Key
	name   string
	shared bool
	pair   bool // the two-int4 form: pg_advisory_lock(key>>32, int32(key))
	gated  bool // queued in the Manager's gate for the key (see gate)
	quiet  bool // a Semaphore's own call: no Acquired or NotAcquired hook (it reports its call)
	hidden bool // and no Ended hook either: the Semaphore's turnstile
}

func named(name string, shared bool) (target, error) {
	if err := ValidateName(name); err != nil {
		return target{}, err
	}
	return target{key: KeyOf(name), name: name, shared: shared}, nil
}

// named is the Manager's form: with a namespace (see WithNamespace) the lock is
// "namespace:name", and that is the name the Lock reports.
func (m *Manager) named(name string, shared bool) (target, error) {
	if name == "" {
		return named(name, shared) // an empty name is refused, namespace or not
	}
	if m.set.namespace != "" {
		name = m.set.namespace + ":" + name
	}
	return named(name, shared)
}

// Lock takes the lock with the given name, blocking until it is held or ctx ends. The
// wait happens on the server (pg_advisory_lock), with no polling. ctx governs getting a
// connection from the pool and the wait.
//
// If ctx ends first, Lock returns an error for which errors.Is(err, ctx.Err()) holds,
// promptly (the server is told to stop waiting with a CancelRequest), and the lock is not
// held: if the grant raced the cancel, Lock releases it before returning. If every pool
// connection stays pinned by this Manager's locks and waits until ctx ends, the error also
// wraps [ErrPoolExhausted]. An invalid name returns an error wrapping [ErrInvalidKey]; a
// closed Manager, [ErrClosed].
//
// Goroutines of one Manager that Lock the same name queue in the process, first come first
// served, and wait on the server one at a time: however many there are, they pin at most
// two connections (the holder's and the waiter's). Across processes the order is the
// server's. (Shared-mode calls are not queued: readers do not wait for each other.)
//
// Locks are not reentrant: a second Lock of a name this Manager already holds waits, like
// any other, until the first is released (with no ctx deadline, forever).
func (m *Manager) Lock(ctx context.Context, name string) (*Lock, error) {
	t, err := m.named(name, false)
	if err != nil {
		return nil, err
	}
	return m.lock(ctx, t)
}

// LockShared is [Manager.Lock] in shared mode (pg_advisory_lock_shared): any number of
// shared holders coexist; an exclusive Lock of the same name waits for all of them, and
// shared ones wait for an exclusive holder.
func (m *Manager) LockShared(ctx context.Context, name string) (*Lock, error) {
	t, err := m.named(name, true)
	if err != nil {
		return nil, err
	}
	return m.lock(ctx, t)
}

// LockKey is [Manager.Lock] for a raw 64-bit key (pg_advisory_lock(key)).
func (m *Manager) LockKey(ctx context.Context, key Key) (*Lock, error) {
	return m.lock(ctx, target{key: key})
}

// LockKeyShared is [Manager.LockShared] for a raw 64-bit key.
func (m *Manager) LockKeyShared(ctx context.Context, key Key) (*Lock, error) {
	return m.lock(ctx, target{key: key, shared: true})
}

func (m *Manager) lock(ctx context.Context, t target) (*Lock, error) {
	return m.take(ctx, t, false)
}

// take runs one Lock (try false) or TryLock (try true) call.
func (m *Manager) take(ctx context.Context, t target, try bool) (*Lock, error) {
	return m.attempt(ctx, t, try, !try)
}

// attempt is take with the pool's behaviour chosen apart: with waitPool false it fails at
// once with ErrPoolExhausted when this Manager pins every connection (TryLock), with
// waitPool true it waits for one until ctx ends (Lock, and a Semaphore's slot tries).
func (m *Manager) attempt(ctx context.Context, t target, try, waitPool bool) (*Lock, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.active.Done()
	start := time.Now()
	op := "lock"
	if try {
		op = "try lock"
	}
	if t.gated = !try && !t.shared; t.gated {
		// Goroutines of this Manager after the same key queue here, and wait on the server
		// one at a time, instead of each pinning a connection.
		if err := m.gates.enter(ctx, gateKey{t.key, t.pair}, m.closing); err != nil {
			return nil, m.notAcquired(ctx, t, try, start, lockError(op, t, err))
		}
		defer m.gates.stopWaiting(gateKey{t.key, t.pair})
	}
	for attempt := 0; ; attempt++ {
		s, err := m.acquire(ctx, t, waitPool)
		if err != nil {
			return nil, m.notAcquired(ctx, t, try, start, lockError(op, t, err))
		}
		if try {
			err = s.tryLock(ctx)
		} else {
			err = s.lock(ctx)
		}
		if err == nil {
			s.logAcquired(start)
			if h := m.set.hooks.Acquired; h != nil && !t.quiet {
				ev := s.event(time.Since(start), 0, "", nil)
				ev.Try = try
				callUser(m.set.logger, "hook Acquired", func() { h(ev) })
			}
			return &s.handle, nil
		}
		s.end(true, ErrNotHeld)
		var locked *LockedError
		switch {
		case errors.As(err, &locked):
			return nil, m.notAcquired(ctx, t, try, start, err)
		case attempt > 0 || !staleConn(ctx, err):
			return nil, m.notAcquired(ctx, t, try, start, lockError(op, t, err))
		}
	}
}

// notAcquired reports a failed Lock or TryLock call to the NotAcquired hook, and returns
// its error.
func (m *Manager) notAcquired(ctx context.Context, t target, try bool, start time.Time, err error) error {
	if h := m.set.hooks.NotAcquired; h != nil && !t.quiet {
		ev := LockEvent{Name: t.name, Key: t.key, Shared: t.shared, Try: try, Wait: time.Since(start),
			Reason: failReason(ctx, err), Err: err}
		callUser(m.set.logger, "hook NotAcquired", func() { h(ev) })
	}
	return err
}

// staleConn reports whether err says a pooled connection was already dead when a
// statement was sent on it (the server restarted, say): nothing reached the server, so
// the call is tried once more on a fresh connection.
func staleConn(ctx context.Context, err error) bool {
	return ctx.Err() == nil && pgconn.SafeToRetry(err)
}

// TryLock takes the lock with the given name if no other session holds it, without
// waiting for it. If it is held elsewhere, TryLock returns a *[LockedError] wrapping
// [ErrLocked]. It does not wait for a pool connection either when this Manager's locks and
// waits pin all of them: it returns an error wrapping [ErrPoolExhausted]. ctx governs
// connecting and the round trip; if ctx ends during the round trip the statement is
// cancelled, as a Lock's wait is, and the lock is not held when TryLock returns: a grant
// that raced the cancel is released first. Invalid names and a closed Manager fail as for
// [Manager.Lock].
func (m *Manager) TryLock(ctx context.Context, name string) (*Lock, error) {
	t, err := m.named(name, false)
	if err != nil {
		return nil, err
	}
	return m.tryLock(ctx, t)
}

// TryLockShared is [Manager.TryLock] in shared mode (pg_try_advisory_lock_shared): it
// fails with [ErrLocked] only if an exclusive holder has the lock.
func (m *Manager) TryLockShared(ctx context.Context, name string) (*Lock, error) {
	t, err := m.named(name, true)
	if err != nil {
		return nil, err
	}
	return m.tryLock(ctx, t)
}

// TryLockKey is [Manager.TryLock] for a raw 64-bit key (pg_try_advisory_lock(key)).
func (m *Manager) TryLockKey(ctx context.Context, key Key) (*Lock, error) {
	return m.tryLock(ctx, target{key: key})
}

// TryLockKeyShared is [Manager.TryLockShared] for a raw 64-bit key.
func (m *Manager) TryLockKeyShared(ctx context.Context, key Key) (*Lock, error) {
	return m.tryLock(ctx, target{key: key, shared: true})
}

func (m *Manager) tryLock(ctx context.Context, t target) (*Lock, error) {
	return m.take(ctx, t, true)
}

func lockError(op string, t target, err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	return &opError{op, describe(t.key, t.name, t.pair), err}
}
