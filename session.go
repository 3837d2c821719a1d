package advisory

import (
	"context"
	"errors"
	"fmt"
	"sort"
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
func (m *Manager) Session(ctx context.Context) (*Session, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.active.Done()
	s, err := m.acquire(ctx, target{}, true)
	if err != nil {
		return nil, lockError("session", target{name: "session"}, err)
	}
	s.multi = true
	s.args[0] = &s.argKey // the key of each call: see pin.args
	if !s.hold() {
		s.end(true, ErrClosed)
		return nil, ErrClosed
	}
	return &Session{m: m, pin: s, turn: make(chan struct{}, 1), held: make(map[target]int),
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

// enterCall waits for the Session's turn. It fails, changing nothing, if ctx ends first
// (an error wrapping ctx.Err()), if the Session ended (its end error) or if Close began
// (ErrNotHeld). After nil the caller must call leaveCall.
func (s *Session) enterCall(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("advisory: queued behind another call on this session: %w", ctx.Err())
	case <-s.closing:
		return s.endedError()
	case <-s.pin.done:
		return s.endedError()
	}
	err := s.pin.endErr() // lost or closed: say so before anything else
	if err == nil && s.isClosing() {
		err = errSessionClosed
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		s.leaveCall()
	}
	return err
}

func (s *Session) leaveCall() { <-s.turn }

// endedError is the error of a call on a Session that has ended or is closing: the same
// as Err once it has ended (a loss stays a loss after Close), else ErrNotHeld.
func (s *Session) endedError() error {
	if err := s.pin.endErr(); err != nil {
		return err
	}
	return errSessionClosed
}

func (s *Session) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
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

// lockNames is Lock, TryLock, LockAll and TryLockAll: it validates the names, takes
// those the Session does not hold yet in one statement, and counts every name once more.
func (s *Session) lockNames(ctx context.Context, names []string, try bool) error {
	ts := make([]target, 0, len(names))
	for _, n := range names {
		t, err := s.m.named(n, false)
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	if err := s.enterCall(ctx); err != nil {
		return err
	}
	defer s.leaveCall()
	fresh := s.fresh(ts)
	if n := s.count(); n+len(fresh) > s.m.set.sessionCap {
		return fmt.Errorf("%w: %d held, %d more asked for, the cap is %d", ErrTooManyLocks, n, len(fresh), s.m.set.sessionCap)
	}
	if len(fresh) > 0 {
		if err := s.op(ctx, func() error { return s.takeInterruptibly(ctx, fresh, try) }); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		s.held[t]++
	}
	s.peak = max(s.peak, len(s.held))
	return nil
}

// takeInterruptibly is take, as a wait that Close may interrupt (see setWaiting).
func (s *Session) takeInterruptibly(ctx context.Context, ts []target, try bool) error {
	if !s.setWaiting(true) {
		return errSessionClosed
	}
	err := s.take(ctx, ts, try)
	var cf *connFailure
	if err != nil && !errors.As(err, &cf) && ctx.Err() == nil && s.isClosing() {
		return errSessionClosed // interrupted by Close; take released whatever it got
	}
	return err
}

// setWaiting marks the Session's lock statement as running (Close interrupts it) or not.
// Marking it running fails once Close has begun. take unmarks it as soon as the statement
// returns and before it settles the cancel handler, as pin.lock does with its state, so
// that an interrupt from Close is always one that Settle sees.
func (s *Session) setWaiting(on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on && s.isClosing() {
		return false
	}
	s.waiting = on
	return true
}
func (s *Session) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// fresh returns the distinct targets of ts the Session does not hold yet, in key order.
func (s *Session) fresh(ts []target) []target {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ts) == 1 { // Lock and TryLock: no set, no sort
		if s.held[ts[0]] > 0 {
			return nil
		}
		return ts
	}
	seen := make(map[target]bool, len(ts))
	var out []target
	for _, t := range ts {
		if s.held[t] == 0 && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
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
	}
	err = s.op(ctx, func() error { return s.unlockKey(ctx, t) })
	if err == nil || !errors.Is(err, ErrLockLost) {
		s.mu.Lock()
		delete(s.held, t)
		s.mu.Unlock()
	}
	return err
}

// unlockKey releases the lock t on the server, on the Session's connection, within
// cleanupTimeout whatever ctx; a connFailure if it cannot be confirmed.
func (s *Session) unlockKey(ctx context.Context, t target) error {
	// The bound is a socket deadline, under a ctx that cannot be cancelled (so that pgx
	// does not watch it): a timeout ctx would cost a timer and a context watcher per call.
	// On the deadline the read fails and pgx closes the connection, as on a timeout ctx.
	conn := s.pin.pg.Conn()
	conn.SetDeadline(time.Now().Add(cleanupTimeout))
	owned, err := s.pin.unlockOne(context.WithoutCancel(ctx), t.key)
	conn.SetDeadline(time.Time{})
	if err == nil && !owned {
		err = s.pin.foreignError()
	}
	if err != nil {
		return &connFailure{err} // unknown whether it is still held: the connection must go
	}
	return nil
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
