package advisory

import (
	"context"
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
	if !t.quiet {
		m.fireAcquired(LockEvent{Name: t.name, Key: t.key, Shared: t.shared, Try: try, Wait: wait})
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
	p.m.fireEnded(LockEvent{Name: sh.t.name, Key: sh.t.key, Shared: sh.t.shared, Held: held, Reason: endReason(err), Err: lostErr(err)})
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

// The sharedHolding as a footing (see lock_footing.go): a slot on a shared session.

func (sh *sharedHolding) holds() target             { return sh.t }
func (sh *sharedHolding) doneChan() <-chan struct{} { return sh.done }
func (sh *sharedHolding) endOf() error              { return sh.err }
func (sh *sharedHolding) holding() footing          { return sh }
func (sh *sharedHolding) nestedSet() *nestedLocks   { return &sh.nested }

// nestRefusal: a re-entry nests only while the holding is held, its Unlock not begun.
func (sh *sharedHolding) nestRefusal() error {
	switch {
	case sh.err != nil:
		return sh.err
	case sh.ending:
		return errHoldingReleasing
	}
	return nil
}

// workTag is the holding's work tag: its key's prefix, and its host's pid with a nonce
// of its own (see pin.workTag).
func (sh *sharedHolding) workTag() string {
	p := sh.h.s.pin
	return sh.tag.get(func() string { return tagPrefix(p.dbOID, sh.t.key, sh.t.pair) }, p.pid)
}

// own: a holding that shares its session has none of its own (see WithSharedSessions).
func (sh *sharedHolding) own(op string, l *Lock, _ bool) (*pin, error) {
	return nil, &opError{op, describe(sh.t.key, l.name, sh.t.pair), fmt.Errorf("%w: use Do, DoTx or a Manager "+
		"without WithSharedSessions for a lock that needs its own session", ErrSharedSession)}
}

// unlockFor releases the holding on its host, in the host's next batch, bounded by
// cleanupTimeout whatever ctx (as a Session's Unlock): an unlock cut short would leave it
// unknown whether the lock is still held.
func (sh *sharedHolding) unlockFor(context.Context, *Lock) error {
	h, p := sh.h, sh.h.s.pin
	p.mu.Lock()
	if sh.err != nil || sh.ending {
		err := sh.err
		p.mu.Unlock()
		if err == nil {
			err = errHoldingReleasing
		}
		return err
	}
	sh.ending = true
	p.mu.Unlock()
	k := gateKey{sh.t.key, sh.t.pair}
	hs := &p.m.hosts
	hs.mu.Lock()
	h.busy++
	hs.mu.Unlock()
	sh.endNested(errHoldingReleased)
	released, err := h.do(sh.t, false)
	switch {
	case err != nil && !errors.Is(err, errNotHeldByServer):
		hs.done(h, k, nil, false)
		sh.end(h.s.Err()) // the host is lost: its watch tells the others
		return sh.endErr()
	case !released:
		hs.done(h, k, nil, true)
		code, words := lossCause(errNotHeldByServer)
		sh.end(&lostError{code, words, "", errNotHeldByServer})
		return sh.endErr()
	}
	hs.done(h, k, nil, true)
	sh.end(ErrNotHeld)
	hs.wakeParked(k)
	return nil
}
