package advisory

import (
	"errors"
	"fmt"
	"log/slog"
	"time"
)

// The end of a holding that shares its session, what it tells, and what its Lock may
// still do (see shared.go).

// sharedAcquired reports a lock taken on a shared session to the log and the Acquired
// hook.
func (m *Manager) sharedAcquired(t target, try bool, start time.Time) {
	wait := time.Since(start)
	if m.set.logger != nil {
		m.set.logger.Debug("advisory: lock acquired on a shared session", slog.String("lock", describe(t.key, t.name, t.pair)),
			slog.Duration("waited", wait.Round(time.Microsecond)))
	}
	if h := m.set.hooks.Acquired; h != nil && !t.quiet {
		ev := LockEvent{Name: t.name, Key: t.key, Shared: t.shared, Try: try, Wait: wait}
		callUser(m.set.logger, "hook Acquired", func() { h(ev) })
	}
}

// end ends the holding with err (ErrNotHeld: released; else its loss), once, and tells
// its re-entered Locks, its Done, its hook and the log.
func (sh *sharedHolding) end(err error) {
	p := sh.h.s.pin
	if err == nil {
		err = p.closedLoss()
	}
	p.mu.Lock()
	if sh.err != nil {
		p.mu.Unlock()
		return
	}
	if errors.Is(err, ErrLockLost) {
		err = &opError{"lock", describe(sh.t.key, sh.t.name, sh.t.pair), &causeError{"on a shared session", err}}
	}
	sh.err = err
	sh.nested.endAll(err)
	p.mu.Unlock()
	held := time.Since(sh.since)
	if p.m.set.logger != nil && errors.Is(err, ErrLockLost) {
		p.log(slog.LevelWarn, "advisory: lock on a shared session lost", slog.String("lock", describe(sh.t.key, sh.t.name, sh.t.pair)),
			slog.Duration("held", held.Round(time.Microsecond)), slog.String("cause", err.Error()))
	}
	if hook := p.m.set.hooks.Ended; hook != nil {
		ev := LockEvent{Name: sh.t.name, Key: sh.t.key, Shared: sh.t.shared, Held: held, Reason: endReason(err), Err: lostErr(err)}
		callUser(p.m.set.logger, "hook Ended", func() { hook(ev) })
	}
	close(sh.done)
}

func (sh *sharedHolding) endErr() error {
	p := sh.h.s.pin
	p.mu.Lock()
	defer p.mu.Unlock()
	return sh.err
}

// endNested ends the holding's open re-entered Locks, as its release begins.
func (sh *sharedHolding) endNested(err error) {
	p := sh.h.s.pin
	p.mu.Lock()
	sh.nested.endAll(err)
	p.mu.Unlock()
}

// nest opens a re-entered Lock named name on the holding (see pin.nest).
func (sh *sharedHolding) nest(name string) (*Lock, int, error) {
	p := sh.h.s.pin
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case sh.err != nil:
		return nil, 0, sh.err
	case sh.ending:
		return nil, 0, errHoldingReleasing
	}
	l := &Lock{s: p, name: name, sh: sh, in: &reentry{done: make(chan struct{})}}
	return l, sh.nested.add(l), nil
}

// workTag is the holding's work tag: its key's prefix, and its host's pid with a nonce
// of its own (see pin.workTag).
func (sh *sharedHolding) workTag() string {
	sh.tagOnce.Do(func() {
		p := sh.h.s.pin
		sh.tag = tagPrefix(p.dbOID, sh.t.key, sh.t.pair) + holderTag(p.pid)
	})
	return sh.tag
}

// sharedRefusal is the error of a call that needs a session of the holding's own (see
// WithSharedSessions), or nil for a Lock that has one.
func (l *Lock) sharedRefusal(op string) error {
	if l.sh == nil {
		return nil
	}
	return &opError{op, describe(l.sh.t.key, l.name, l.sh.t.pair), fmt.Errorf("%w: use Do, DoTx or a Manager "+
		"without WithSharedSessions for a lock that needs its own session", ErrSharedSession)}
}

// SharesSession reports whether the lock is held on a server session that other holdings
// of its Manager may share (see [WithSharedSessions]): then its loss is the session's,
// and the calls that need a session of the lock's own fail with [ErrSharedSession]. It
// does not block.
func (l *Lock) SharesSession() bool { return l.sh != nil }
