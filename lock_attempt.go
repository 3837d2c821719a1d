package advisory

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// Lock takes the lock with the given name, blocking until it is held or ctx ends; the wait
// happens on the server, with no polling. ctx governs getting a connection and the wait.
// If ctx ends first, the error satisfies errors.Is(err, ctx.Err()), promptly, and the lock
// is not held (a grant that raced the cancel is released first); it also wraps
// [ErrPoolExhausted] if every connection stayed pinned by this Manager. An invalid name
// wraps [ErrInvalidKey]; a closed Manager, [ErrClosed]. A connection found dead, or a
// session the server ends before Lock returns (pg_terminate_backend while it waits), holds
// nothing: Lock tries once more on a fresh connection, and returns a second such failure.
//
// Goroutines of one Manager that Lock the same name queue in the process, first come first
// served, pinning at most two connections; across processes the order is the server's
// ([WithLocalHandoff] lets the lock pass between them, within a bound).
//
// A call whose ctx carries a holding of the same lock re-enters it, or fails with
// [ErrNotReentrant], at once (see [Manager]); any other Lock of a name this Manager holds
// waits for its release, as PostgreSQL's would (after a second, a Warn is logged).
func (m *Manager) Lock(ctx context.Context, name string) (*Lock, error) {
	t, err := m.named(name, false)
	if err != nil {
		return nil, err
	}
	return m.attempt(ctx, t, modeLock)
}

// LockShared is [Manager.Lock] in shared mode (pg_advisory_lock_shared): any number of
// shared holders coexist; an exclusive Lock of the same name waits for all of them, and
// shared ones wait for an exclusive holder.
func (m *Manager) LockShared(ctx context.Context, name string) (*Lock, error) {
	t, err := m.named(name, true)
	if err != nil {
		return nil, err
	}
	return m.attempt(ctx, t, modeLock)
}

// LockKey is [Manager.Lock] for a raw 64-bit key (pg_advisory_lock(key)).
func (m *Manager) LockKey(ctx context.Context, key Key) (*Lock, error) {
	return m.attempt(ctx, target{key: key}, modeLock)
}

// LockKeyShared is [Manager.LockShared] for a raw 64-bit key.
func (m *Manager) LockKeyShared(ctx context.Context, key Key) (*Lock, error) {
	return m.attempt(ctx, target{key: key, shared: true}, modeLock)
}

// TryLock takes the lock with the given name if no other session holds it, without
// waiting for it. If it is held elsewhere, TryLock returns a *[LockedError] wrapping
// [ErrLocked]. It does not wait for a pool connection either when this Manager's locks and
// waits pin all of them: it returns an error wrapping [ErrPoolExhausted] at once (under
// [WithSharedSessions] too, when every shared session is full as well). ctx governs
// connecting and the round trip; if ctx ends during the round trip the statement is
// cancelled, as a Lock's wait is, and the lock is not held when TryLock returns: a grant
// that raced the cancel is released first. Invalid names and a closed Manager fail as for
// [Manager.Lock], and a dead connection or an ended session is tried once more as there;
// a ctx that carries a holding of the lock re-enters it as there. With a heartbeat (behind
// a proxy, by default) a try the server has not answered within Bounds.HeartbeatTold (a
// frozen server) fails, not with ctx's error, and its connection is closed (see
// [WithHeartbeat]).
func (m *Manager) TryLock(ctx context.Context, name string) (*Lock, error) {
	t, err := m.named(name, false)
	if err != nil {
		return nil, err
	}
	return m.attempt(ctx, t, modeTry)
}

// TryLockShared is [Manager.TryLock] in shared mode (pg_try_advisory_lock_shared): it
// fails with [ErrLocked] only if an exclusive holder has the lock.
func (m *Manager) TryLockShared(ctx context.Context, name string) (*Lock, error) {
	t, err := m.named(name, true)
	if err != nil {
		return nil, err
	}
	return m.attempt(ctx, t, modeTry)
}

// TryLockKey is [Manager.TryLock] for a raw 64-bit key (pg_try_advisory_lock(key)).
func (m *Manager) TryLockKey(ctx context.Context, key Key) (*Lock, error) {
	return m.attempt(ctx, target{key: key}, modeTry)
}

// TryLockKeyShared is [Manager.TryLockShared] for a raw 64-bit key.
func (m *Manager) TryLockKeyShared(ctx context.Context, key Key) (*Lock, error) {
	return m.attempt(ctx, target{key: key, shared: true}, modeTry)
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
	solo   bool // on a session of its own, also under WithSharedSessions (see sharable)
	tried  bool // a try on a shared session found it taken just now: wait without trying by key first
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

// lockFor is Lock (modeLock) or TryLock (modeTry) of a named exclusive lock for Do, DoTx,
// TryDo and Lead: with solo, the lock is taken on a session of its own also under
// WithSharedSessions, for the drain, the transaction or the announcement that need one.
func (m *Manager) lockFor(ctx context.Context, name string, mode attemptMode, solo bool) (*Lock, error) {
	t, err := m.named(name, false)
	if err != nil {
		return nil, err
	}
	t.solo = solo
	return m.attempt(ctx, t, mode)
}

// An attemptMode is what one attempt does where the lock or the pool is busy.
type attemptMode int

const (
	modeLock    attemptMode = iota // Lock: queue in the process, wait for a connection and on the server
	modeTry                        // TryLock: fail at once, with ErrLocked or ErrPoolExhausted
	modeTrySlot                    // a Semaphore's slot try: wait for a connection, then try the lock
)

// A lockCall is one Lock, TryLock or slot try (see attemptMode) on its way through the
// routes that may serve it (see attempt).
type lockCall struct {
	ctx      context.Context
	t        target
	try      bool // fail at once where the lock is taken (modeTry, modeTrySlot)
	waitPool bool // wait for a pool connection (modeLock, modeTrySlot)
	op       string
	start    time.Time
	// place is the WithWaitSessions place the call holds to wait on a session of its own
	// (see parkRoute), nil for none: the session that gets the lock keeps it.
	place chan struct{}
}

// attempt runs one Lock, TryLock or slot try (see attemptMode) for t. With modeTry it fails
// at once with ErrPoolExhausted when this Manager pins every connection; the other modes
// wait for one until ctx ends.
//
// The call goes down a list of routes, each in the file of its feature, until one serves
// it: re-entry of a holding its ctx carries (lock_reentry.go: one ctx lookup when ctx
// carries none), the key's queue and a handoff from a holder of this Manager
// (lock_queue.go, lock_handoff.go), a shared session (shared.go) or a place to wait
// (shared_wait.go) under WithSharedSessions, and last a session of its own (ownRoute).
func (m *Manager) attempt(ctx context.Context, t target, mode attemptMode) (*Lock, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.active.Done()
	c := &lockCall{ctx: ctx, t: t, try: mode != modeLock, waitPool: mode != modeTry, op: "lock", start: time.Now()}
	if c.try {
		c.op = "try lock"
	}
	// A Semaphore's own calls (quiet) decide re-entry for themselves.
	if h, _ := ctx.Value(holdingKey{}).(*ctxHolding); h != nil && !t.quiet {
		if l, handled, err := m.reenter(ctx, h, t, c.op); handled {
			return l, err
		}
	}
	if c.t.gated = !c.try && !t.shared; c.t.gated {
		if l, served, err := m.queueRoute(c); served {
			return l, err
		}
		defer m.gates.stopWaiting(gateKey{t.key, t.pair})
	}
	if m.set.sharePer > 0 {
		if l, served, err := m.sharedRoute(c); served {
			return l, err
		}
		if c.place != nil {
			defer c.leavePlace(&m.hosts)
		}
	}
	return m.ownRoute(c)
}

// ownRoute takes the lock on a session of the call's own: a pool connection pinned for
// it. A session the server ended before the call returned is tried once more.
func (m *Manager) ownRoute(c *lockCall) (*Lock, error) {
	ctx, t, try := c.ctx, c.t, c.try
	for attempt := 0; ; attempt++ {
		s, err := m.acquire(ctx, t, c.waitPool, c.start)
		if err != nil {
			return nil, m.notAcquired(ctx, t, try, c.start, lockError(c.op, t, err))
		}
		if try {
			err = s.tryLock(ctx)
		} else {
			err = s.lock(ctx)
		}
		if err == nil {
			return m.ownAcquired(c, s), nil
		}
		s.end(true, ErrNotHeld)
		var locked *LockedError
		switch {
		case errors.As(err, &locked):
			return nil, m.notAcquired(ctx, t, try, c.start, err)
		case attempt > 0 || !retryable(ctx, err):
			return nil, m.notAcquired(ctx, t, try, c.start, lockError(c.op, t, err))
		}
		s.log(slog.LevelWarn, "advisory: the lock call's session ended before it returned; trying once more",
			slog.String("cause", err.Error()))
	}
}

// ownAcquired hands the call the lock its session s took, and reports it.
func (m *Manager) ownAcquired(c *lockCall, s *pin) *Lock {
	if c.place != nil {
		s.holdPlace(c.place) // the session and its holding keep the place until the connection goes back
		c.place = nil
	}
	if s.handoff {
		m.gates.held(s)
	}
	if m.set.logger != nil {
		s.logAcquired(c.start)
	}
	if m.set.hooks.Acquired != nil && !c.t.quiet {
		ev := s.event(time.Since(c.start), 0, "", nil)
		ev.Try = c.try
		m.fireAcquired(ev)
	}
	return &s.handle
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

// retryable reports whether a Lock or TryLock that failed with err is tried once more on
// a fresh connection, ctx permitting. Either nothing reached the server (a pooled
// connection already dead: the server restarted, say), or the server ended the session
// before the call returned: a termination while the call waited, or one that landed
// between the grant and the end of the call's statements (a named lock tried by key runs
// the name's comment after the grant: see pin_named.go). A session that has ended holds
// nothing and waits for nothing, and nobody was told it held the lock, so trying again
// leaves nothing behind. A second failure is returned.
func retryable(ctx context.Context, err error) bool {
	return ctx.Err() == nil && (pgconn.SafeToRetry(err) || serverEnded(err))
}

func lockError(op string, t target, err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	return &opError{op, describe(t.key, t.name, t.pair), err}
}
