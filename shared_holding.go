package advisory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A sharedHolding is one lock held on a host (see shared.go): what a Lock of its own pin
// keeps on the pin (its end, its re-entered Locks), it keeps here, under the host pin's
// mu. Its Lock's s is the host's pin, whose connection, pid and Manager it shares.
type sharedHolding struct {
	h      *host
	t      target
	done   chan struct{}
	err    error // nil while held; under the host pin's mu
	ending bool  // an Unlock has begun; under the host pin's mu
	since  time.Time
	nested nestedLocks // its open re-entered Locks; under the host pin's mu
	tag    lazyTag     // its work tag, made on first use
}

// hostLost is take's error when the host ended before the key was held on it: the call
// holds nothing and may try again. cause is why the session ended (a FATAL, a network
// error), which the call returns after its last try, as a Lock of its own session does.
type hostLost struct{ cause error }

func (e *hostLost) Error() string { return "the shared session ended: " + e.cause.Error() }
func (e *hostLost) Unwrap() error { return e.cause }

// errOpenerGone is take's error when the host it chose failed to open because the ctx
// of the call that was opening it ended: the call tries again.
var errOpenerGone = errors.New("advisory: the call opening the shared session gave up")

// lost is hostLost for h, whose session has ended; ErrClosed if the Manager's Close
// ended it.
func (h *host) lost() error {
	err := h.s.Err()
	var le *lostError
	switch {
	case err == nil, errors.Is(err, ErrClosed):
		return ErrClosed
	case errors.As(err, &le):
		return &hostLost{le.cause}
	}
	return &hostLost{err}
}

// errMoved is take's error when a Lock waiting for a host whose opening waits for the
// pool leaves it for a host that gained room: the call chooses again.
var errMoved = errors.New("advisory: a shared session has room again")

// sharedRoute serves a call under WithSharedSessions (served), if its target may share:
// on a shared session if the lock is free there, or with the refusal of a try that
// finds it taken. A Lock of a key found taken there (now, or lately) goes on to wait on
// a session of its own; under WithWaitSessions it takes a place to first (parkRoute).
func (m *Manager) sharedRoute(c *lockCall) (l *Lock, served bool, err error) {
	if !m.sharable(c.t) {
		return nil, false, nil
	}
	if c.try || !m.hosts.taken.skip(c.t.key) {
		l, err := m.takeShared(c.ctx, c.t, c.try)
		if c.t.tried = l == nil && err == nil; c.t.tried { // taken: the wait tries no more
			m.hosts.taken.record(c.t.key)
		}
		var locked *LockedError
		switch {
		case l != nil:
			m.sharedAcquired(c.t, c.try, c.start)
			return l, true, nil
		case errors.As(err, &locked):
			return nil, true, m.notAcquired(c.ctx, c.t, c.try, c.start, err)
		case err != nil:
			return nil, true, m.notAcquired(c.ctx, c.t, c.try, c.start, lockError(c.op, c.t, err))
		}
	}
	if c.try || m.hosts.waitPlaces == nil {
		return nil, false, nil
	}
	return m.parkRoute(c)
}

// takeShared takes t's lock on a shared session. It returns the Lock; or nil, nil when
// the call must go on as without sharing (a Lock whose key is taken: it waits on a
// session of its own); or an error: a *LockedError for a try whose key is taken, ctx's
// error, ErrClosed, or the failure to open a shared session (for a try, ErrPoolExhausted
// at once when no host has room and the pool no connection to spare).
func (m *Manager) takeShared(ctx context.Context, t target, try bool) (*Lock, error) {
	if err := ctx.Err(); err != nil { // a done ctx changes nothing, as on a session of its own
		return nil, err
	}
	mayOpen := true
	var exhausted error
	for attempt := 0; ; {
		h, held, open, room := m.hosts.choose(t, m.set.sharePer, mayOpen, try)
		switch {
		case held && try:
			return nil, &LockedError{Key: t.key, Name: t.name}
		case held:
			return nil, nil
		case h == nil: // a try, and no host has room
			return nil, exhausted
		}
		l, got, err := m.takeOn(ctx, h, t, open, room)
		switch {
		case errors.Is(err, ErrPoolExhausted) && !h.waits:
			mayOpen, exhausted = false, err // no connection to spare: a busy host, or none for a try
			if oe := (*opError)(nil); errors.As(err, &oe) {
				exhausted = &causeError{"advisory: every shared session is full", oe.err} // the call's own error, not "session"
			}
			continue
		case errors.Is(err, errOpenerGone), errors.Is(err, errMoved):
			continue
		case errors.As(err, new(*hostLost)) && attempt < 2 && ctx.Err() == nil:
			attempt++
			m.hosts.forget(h) // before its watch runs, or the next choice may be h again
			continue          // it held nothing for us: another host
		case err != nil:
			return nil, err
		case got:
			return l, nil
		case try:
			return nil, &LockedError{Key: t.key, Name: t.name}
		}
		return nil, nil
	}
}

// takeOn is take on h, which the call chose, opening it first if it added it (open): a
// host whose opening may wait for the pool is opened on a goroutine of its own, which the
// call stops if it moves to another host.
func (m *Manager) takeOn(ctx context.Context, h *host, t target, open bool, room <-chan struct{}) (*Lock, bool, error) {
	switch {
	case open && h.waits:
		if err := m.enter(); err != nil { // Close has begun: the opening fails at once
			m.hosts.start(ctx, m, h)
			break
		}
		octx, stop := context.WithCancel(ctx)
		defer stop() // once h is ready its ctx is not used; before, the call has moved or ended
		go func() {
			defer m.active.Done()
			m.hosts.start(octx, m, h)
		}()
	case open:
		m.hosts.start(ctx, m, h)
	}
	return h.take(ctx, m, t, room)
}

// take tries t's lock on h, whose key is reserved for it: a Lock if the server granted
// it (got), with ctx not ended; else none, holding nothing. While h is not open yet, a
// close of room (see choose) moves the call: errMoved.
func (h *host) take(ctx context.Context, m *Manager, t target, room <-chan struct{}) (l *Lock, got bool, err error) {
	k := gateKey{t.key, t.pair}
	if err := h.awaitOpen(ctx, m, k, room); err != nil {
		return nil, false, err
	}
	if h.s == nil { // it failed to open
		m.hosts.done(h, k, nil, true)
		if ctx.Err() == nil && (errors.Is(h.openErr, context.Canceled) || errors.Is(h.openErr, context.DeadlineExceeded)) {
			return nil, false, errOpenerGone // the ctx of the call that opened it ended, not ours
		}
		return nil, false, h.openErr
	}
	s := h.s
	got, err = h.do(t, true)
	if err == nil && got && ctx.Err() != nil {
		// ctx ended while the try ran: the key goes again.
		if _, err = h.do(t, false); err == nil {
			got = false
		}
	}
	if err != nil || !got {
		m.hosts.done(h, k, nil, true)
		switch {
		case err == nil && ctx.Err() != nil:
			return nil, false, ctx.Err()
		case errors.Is(err, ErrClosed):
			return nil, false, ErrClosed
		case errors.Is(err, ErrLockLost), errors.Is(err, errSessionClosed):
			return nil, false, h.lost()
		}
		return nil, false, err
	}
	sh := &sharedHolding{h: h, t: t, done: make(chan struct{}), since: time.Now()}
	if !m.hosts.done(h, k, sh, false) { // lost meanwhile: its watch has told its holdings already
		sh.end(s.Err())
		return nil, false, h.lost()
	}
	return &Lock{s: s.pin, on: sh, name: t.name}, true, nil
}

// awaitOpen waits until h has opened (or failed to), ctx ends, or, while h is not open,
// room closes; in the last two cases the key reserved on h goes back, and the call's
// error is returned: ctx's (with ErrPoolExhausted if h's opening waited for the pool), or
// errMoved.
func (h *host) awaitOpen(ctx context.Context, m *Manager, k gateKey, room <-chan struct{}) error {
	select {
	case <-h.ready:
		return nil
	case <-room:
		if isClosed(h.ready) {
			return nil
		}
		m.hosts.done(h, k, nil, true)
		return errMoved
	case <-ctx.Done():
		m.hosts.done(h, k, nil, true)
		if h.waits && (!isClosed(h.ready) || h.s == nil) { // its opening waited for the pool until ctx ended
			return fmt.Errorf("%w: every shared session was full, and no connection freed: %w",
				ErrPoolExhausted, ctx.Err())
		}
		return ctx.Err()
	}
}

// done records the end of a statement of a call chosen for h (see choose): the key is
// now sh's holding's, or (drop) not held; else it stays as it was. It returns false if h
// was lost meanwhile, sh not recorded. A host left empty rests (see rest).
func (hs *hostSet) done(h *host, k gateKey, sh *sharedHolding, drop bool) bool {
	hs.mu.Lock()
	h.busy--
	switch {
	case h.gone && sh != nil:
		hs.mu.Unlock()
		return false
	case sh != nil:
		h.keys[k] = sh
		h.peak = max(h.peak, len(h.keys))
	case drop:
		delete(h.keys, k)
		if h.s != nil && !h.gone {
			hs.gainedRoom()
		}
	}
	hs.rest(h)
	hs.mu.Unlock()
	return true
}

// idle reports whether h holds nothing, has no call chosen for it, and is not the one
// shared session kept for the tries of parked Locks (see park); under hs.mu.
func (hs *hostSet) idle(h *host) bool {
	return !h.gone && len(h.keys) == 0 && h.busy == 0 && (hs.parked == 0 || len(hs.hosts) > 1)
}
