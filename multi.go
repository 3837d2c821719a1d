package advisory

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
)

// unlockAllSQL releases every session lock of the backend (a Session's Close).
const unlockAllSQL = "SELECT pg_backend_pid(), pg_advisory_unlock_all()"

// Defaults of a Session's limits; see WithSessionLimits.
const (
	defaultSessionCap    = 10000
	defaultSessionRetire = 1000
)

// errSessionClosed is a Session's end error after its Close.
var errSessionClosed = fmt.Errorf("%w: the session was closed", ErrNotHeld)

// A Session is one connection pinned from the Manager's pool, on which many locks can be
// held at once: the model for a caller who needs thousands of locks, where a connection
// per lock would exhaust the server. All its locks share the connection's fate: if it is
// lost, they all are (Done, Err). Locks on a Session are reentrant: locking a key it
// holds counts up, and it takes as many Unlocks to release.
//
// A Session runs one call at a time; concurrent calls wait for each other. It is safe for
// use by multiple goroutines.
type Session struct {
	m    *Manager
	s    *session
	mu   sync.Mutex
	held map[target]int // per key and mode: how many times this Session holds it
	peak int
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
	if !s.hold() {
		s.end(true, ErrClosed)
		return nil, ErrClosed
	}
	return &Session{m: m, s: s, held: make(map[target]int)}, nil
}

// PID returns the backend pid of the Session's connection.
func (S *Session) PID() uint32 { return S.s.pid }

// Done is closed when the Session ends: Close, loss, or the Manager's Close.
func (S *Session) Done() <-chan struct{} { return S.s.done }

// Err is nil while the Session is open; after Done it wraps ErrLockLost if the Session
// was lost, or ErrNotHeld after Close (calls on a closed Session return it too).
func (S *Session) Err() error { return S.s.endErr() }

// Held returns how many distinct keys the Session holds: 0 once it has ended.
func (S *Session) Held() int {
	S.mu.Lock()
	defer S.mu.Unlock()
	if S.s.endErr() != nil {
		return 0
	}
	return len(S.held)
}

// Lock takes the named lock on the Session, blocking on the server until it is held or
// ctx ends, with the cancellation guarantees of [Manager.Lock]. If the Session already
// holds it, Lock counts up at once. On loss of the Session it returns an error wrapping
// ErrLockLost.
func (S *Session) Lock(ctx context.Context, name string) error {
	return S.lockNames(ctx, []string{name}, false)
}

// TryLock is Lock without waiting: *LockedError if another session holds the lock.
func (S *Session) TryLock(ctx context.Context, name string) error {
	return S.lockNames(ctx, []string{name}, true)
}

// LockAll takes every named lock, in one statement (so 10,000 locks cost one round trip,
// not 10,000), in key order (so Sessions taking overlapping sets cannot deadlock),
// blocking until all are held or ctx ends. It is all or nothing: on any error none of the
// names is newly held.
func (S *Session) LockAll(ctx context.Context, names []string) error {
	return S.lockNames(ctx, names, false)
}

// TryLockAll takes every named lock if none is held elsewhere, in one statement; if any
// is, it takes none and returns a *LockedError naming one of them.
func (S *Session) TryLockAll(ctx context.Context, names []string) error {
	return S.lockNames(ctx, names, true)
}

func (S *Session) lockNames(ctx context.Context, names []string, try bool) error {
	ts := make([]target, 0, len(names))
	for _, n := range names {
		t, err := S.m.named(n, false)
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	S.mu.Lock()
	defer S.mu.Unlock()
	if err := S.s.endErr(); err != nil {
		return err // lost or closed: say so before anything else
	}
	fresh := S.fresh(ts)
	if len(S.held)+len(fresh) > S.m.set.sessionCap {
		return fmt.Errorf("%w: %d held, %d more asked for, the cap is %d", ErrTooManyLocks, len(S.held), len(fresh), S.m.set.sessionCap)
	}
	if len(fresh) > 0 {
		if err := S.op(ctx, func() error { return S.take(ctx, fresh, try) }); err != nil {
			return err
		}
	}
	for _, t := range ts {
		S.held[t]++
	}
	S.peak = max(S.peak, len(S.held))
	return nil
}

// fresh returns the distinct targets of ts the Session does not hold yet, in key order.
func (S *Session) fresh(ts []target) []target {
	seen := make(map[target]bool, len(ts))
	var out []target
	for _, t := range ts {
		if S.held[t] == 0 && !seen[t] {
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
func (S *Session) Unlock(ctx context.Context, name string) error {
	t, err := S.m.named(name, false)
	if err != nil {
		return err
	}
	S.mu.Lock()
	defer S.mu.Unlock()
	if err := S.s.endErr(); err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	switch S.held[t] {
	case 0:
		return fmt.Errorf("%w: %s on this session", ErrNotHeld, describe(t.key, t.name, false))
	case 1:
	default:
		S.held[t]--
		return nil
	}
	err = S.op(ctx, func() error {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
		var n int64
		if err := S.s.pc.QueryRow(uctx, unlockKeysSQL, []int64{int64(t.key)}).Scan(&n); err != nil {
			return &connFailure{err} // unknown whether it is still held: the connection must go
		}
		return nil
	})
	if err == nil || !errors.Is(err, ErrLockLost) {
		delete(S.held, t)
	}
	return err
}

// Close releases every lock of the Session (pg_advisory_unlock_all) and gives its
// connection back to the pool, or closes the connection if the Session ever held more
// than the retire threshold (see WithSessionLimits): a backend keeps paying for every lock
// it held until it exits. ctx governs the release. Close after Close returns ErrNotHeld;
// after a loss, the loss.
func (S *Session) Close(ctx context.Context) error {
	S.mu.Lock()
	defer S.mu.Unlock()
	S.s.retire = S.peak > S.m.set.sessionRetire
	err := S.s.release(ctx, errSessionClosed)
	S.held = map[target]int{}
	return err
}
