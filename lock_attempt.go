package advisory

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

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

// attempt runs one Lock, TryLock or slot try (see attemptMode) for t. With modeTry it fails
// at once with ErrPoolExhausted when this Manager pins every connection; the other modes
// wait for one until ctx ends.
func (m *Manager) attempt(ctx context.Context, t target, mode attemptMode) (*Lock, error) {
	try, waitPool := mode != modeLock, mode != modeTry
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.active.Done()
	start := time.Now()
	op := "lock"
	if try {
		op = "try lock"
	}
	// A ctx that carries a holding of the lock re-enters it, or is refused: see
	// lock_reentry.go. A Semaphore's own calls (quiet) decide that for themselves.
	if h, _ := ctx.Value(holdingKey{}).(*ctxHolding); h != nil && !t.quiet {
		if l, handled, err := m.reenter(ctx, h, t, op); handled {
			return l, err
		}
	}
	if t.gated = !try && !t.shared; t.gated {
		// Goroutines of this Manager after the same key queue here, and wait on the server
		// one at a time, instead of each pinning a connection.
		handed, err := m.gates.enter(ctx, t, m.closing)
		if err != nil {
			return nil, m.notAcquired(ctx, t, try, start, lockError(op, t, err))
		}
		if handed != nil { // a holder of this Manager passed the lock on (see lock_handoff.go)
			return m.handedTo(ctx, t, handed, start)
		}
		defer m.gates.stopWaiting(gateKey{t.key, t.pair})
	}
	// On a shared session if the lock is free (see shared.go); a Lock of a key found taken
	// there lately waits on a session of its own at once.
	if m.sharable(t) && (try || !m.hosts.taken.skip(t.key)) {
		l, err := m.takeShared(ctx, t, try)
		if t.tried = l == nil && err == nil; t.tried { // taken: the wait below tries no more
			m.hosts.taken.record(t.key)
		}
		var locked *LockedError
		switch {
		case l != nil:
			m.sharedAcquired(t, try, start)
			return l, nil
		case errors.As(err, &locked):
			return nil, m.notAcquired(ctx, t, try, start, err)
		case err != nil:
			return nil, m.notAcquired(ctx, t, try, start, lockError(op, t, err))
		}
	}
	var place chan struct{}
	if !try && m.sharable(t) && m.hosts.waitPlaces != nil {
		// Under WithWaitSessions: a place to wait on a session of its own, or none (see
		// shared_wait.go).
		l, p, err := m.park(ctx, t, start)
		switch {
		case l != nil:
			return l, nil
		case err != nil:
			return nil, m.notAcquired(ctx, t, try, start, lockError(op, t, err))
		}
		place = p
		defer func() {
			if place != nil { // not given to a session that holds the lock
				<-place
			}
		}()
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
			s.holdPlace(place) // the session and its holding keep the place until the connection goes back
			place = nil
			m.gates.held(s)
			s.logAcquired(start)
			if !t.quiet {
				ev := s.event(time.Since(start), 0, "", nil)
				ev.Try = try
				m.fireAcquired(ev)
			}
			return &s.handle, nil
		}
		s.end(true, ErrNotHeld)
		var locked *LockedError
		switch {
		case errors.As(err, &locked):
			return nil, m.notAcquired(ctx, t, try, start, err)
		case attempt > 0 || !retryable(ctx, err):
			return nil, m.notAcquired(ctx, t, try, start, lockError(op, t, err))
		}
		s.log(slog.LevelWarn, "advisory: the lock call's session ended before it returned; trying once more",
			slog.String("cause", err.Error()))
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
