package advisory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Defaults of a Session's limits; see WithSessionLimits.
const (
	defaultSessionCap    = 10000
	defaultSessionRetire = 1000
)

// errSessionClosed is a Session's end error after its Close, and the error of calls that
// were queued or waiting when Close began.
var errSessionClosed = fmt.Errorf("%w: the session was closed", ErrNotHeld)

// A Session is one connection pinned from the Manager's pool, on which many locks can be
// held at once: the model for a caller who needs thousands of locks, where a connection
// per lock would exhaust the server. All its locks share the connection's fate: if it is
// lost, they all are (Done, Err). Locks on a Session are reentrant: locking a key it
// holds counts up, and it takes as many Unlocks to release.
//
// A Session runs one call at a time: concurrent calls queue, each bounded by its own ctx
// while it waits for its turn. A call whose ctx ends before or while it waits returns an
// error for which errors.Is(err, ctx.Err()) holds and changes nothing: the Session and
// its locks are as they were. It is safe for use by multiple goroutines.
type Session struct {
	m    *Manager
	pin  *pin
	turn chan struct{} // holds a token while a call runs

	mu      sync.Mutex     // guards the fields below; never held across I/O
	held    map[target]int // per key and mode: how many times this Session holds it
	peak    int
	closing chan struct{} // closed when Close begins
	waiting bool          // a lock statement is running (Close interrupts it)
}

// Session pins a connection for many locks. ctx governs getting the connection. Close
// releases everything. It fails with ErrPoolExhausted (after ctx) like Lock when the pool
// stays full, and with ErrClosed after the Manager's Close.
func (m *Manager) Session(ctx context.Context) (*Session, error) { return m.openSession(ctx, true) }

// openSession is Session; without wait it fails at once with ErrPoolExhausted where
// Session waits for a connection.
func (m *Manager) openSession(ctx context.Context, wait bool) (*Session, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.active.Done()
	s, err := m.acquire(ctx, target{}, wait, time.Now())
	if err != nil {
		return nil, lockError("session", target{name: "session"}, err)
	}
	s.multi = true
	s.args[0] = &s.argKey // the key of each call: see pin.args
	s.turn = make(chan struct{}, 1)
	if err := s.lease.open(s, ctx); err != nil {
		s.end(false, ErrNotHeld)
		return nil, lockError("session", target{name: "session"}, err)
	}
	if !s.hold() {
		s.end(true, ErrClosed)
		return nil, ErrClosed
	}
	return &Session{m: m, pin: s, turn: s.turn, held: make(map[target]int),
		closing: make(chan struct{})}, nil
}

// PID returns the backend pid of the Session's connection.
func (s *Session) PID() uint32 { return s.pin.pid }

// Done is closed when the Session ends: Close, loss, or the Manager's Close.
func (s *Session) Done() <-chan struct{} { return s.pin.done }

// Err is nil while the Session is open; after Done it wraps ErrLockLost if the Session
// was lost, or ErrNotHeld after Close (calls on a closed Session return it too).
func (s *Session) Err() error { return s.pin.endErr() }

// Held returns how many distinct keys the Session holds: 0 once it has ended. It does not
// wait for a call in progress.
func (s *Session) Held() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.pin.endErr() != nil {
		return 0
	}
	return len(s.held)
}

// Lock takes the named lock on the Session, blocking on the server until it is held or
// ctx ends, with the cancellation guarantees of [Manager.Lock]. If the Session already
// holds it, Lock counts up at once. ctx also bounds waiting for the Session's other calls.
// On loss of the Session it returns an error wrapping ErrLockLost; if the Session's Close
// begins while Lock waits, ErrNotHeld.
func (s *Session) Lock(ctx context.Context, name string) error {
	return s.lockNames(ctx, []string{name}, false)
}

// TryLock is Lock without waiting: *LockedError if another session holds the lock.
func (s *Session) TryLock(ctx context.Context, name string) error {
	return s.lockNames(ctx, []string{name}, true)
}

// LockAll takes every named lock, in one statement (so 10,000 locks cost one round trip,
// not 10,000), in key order (so Sessions taking overlapping sets cannot deadlock),
// blocking until all are held or ctx ends. It is all or nothing: on any error none of the
// names is newly held.
func (s *Session) LockAll(ctx context.Context, names []string) error {
	return s.lockNames(ctx, names, false)
}

// TryLockAll takes every named lock if none is held elsewhere, in one statement; if any
// is, it takes none and returns a *LockedError naming one of them.
func (s *Session) TryLockAll(ctx context.Context, names []string) error {
	return s.lockNames(ctx, names, true)
}

// Unlock releases one hold of the named lock on the Session (the lock itself when the
// count reaches zero). It returns ErrNotHeld if the Session does not hold it. ctx only
// bounds waiting for the Session's other calls: the unlock statement itself runs under a
// 5 s bound of its own, since an interrupted unlock would leave it unknown whether the
// lock is still held. If that fails the Session is lost (its connection closed: the
// server frees all its locks) and the error wraps ErrLockLost.
func (s *Session) Unlock(ctx context.Context, name string) error {
	t, err := s.m.named(name, false)
	if err != nil {
		return err
	}
	if err := s.enterCall(ctx); err != nil {
		return err
	}
	defer s.leaveCall()
	s.mu.Lock()
	n := s.held[t]
	if n > 1 {
		s.held[t]--
	}
	s.mu.Unlock()
	switch {
	case n == 0:
		return fmt.Errorf("%w: %s on this session", ErrNotHeld, describe(t.key, t.name, false))
	case n > 1:
		return nil
	case !s.pin.lease.unlocksOne():
		return fmt.Errorf("%w: %s stays held until the session's Close, which releases all its locks at once",
			ErrTransactionHolding, describe(t.key, t.name, false))
	}
	err = s.op(ctx, func() error { return s.unlockKey(ctx, t) })
	if err == nil || !errors.Is(err, ErrLockLost) {
		s.mu.Lock()
		delete(s.held, t)
		s.mu.Unlock()
	}
	return err
}

// Close releases every lock of the Session (pg_advisory_unlock_all) and gives its
// connection back to the pool, or closes the connection if the Session ever held more
// than the retire threshold (see WithSessionLimits): a backend keeps paying for every lock
// it held until it exits. A Lock waiting on the server is interrupted (it returns
// ErrNotHeld, holding nothing new) and calls queued behind it return ErrNotHeld; Close
// then waits for the call in progress to finish, which is prompt, except a BeginFunc,
// whose fn it waits for. ctx governs the
// release. If the release cannot be confirmed the connection is closed, which frees the
// locks. Close after Close returns ErrNotHeld; after a loss, the loss.
func (s *Session) Close(ctx context.Context) error {
	s.mu.Lock()
	if !s.isClosing() {
		close(s.closing)
		if s.waiting {
			s.pin.cancel.Interrupt()
		}
	}
	s.mu.Unlock()
	s.turn <- struct{}{} // the call in progress, if any, ends promptly: see setWaiting
	defer s.leaveCall()
	s.mu.Lock()
	s.pin.retire.Store(s.peak > s.m.set.sessionRetire)
	s.held = map[target]int{}
	s.mu.Unlock()
	return s.pin.release(ctx, errSessionClosed)
}
