package advisory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgadvisory/advisory/internal/sockfd"
)

// release ends a held session: it stops the watcher, unlocks, and returns the connection
// to the pool, or closes it if the release cannot be confirmed. endErr is what Err
// reports afterwards. It returns nil on a confirmed release; the session's end error if
// it had already ended (ErrNotHeld, or a loss); ErrNotHeld if another release is under
// way, or the loss Close reports if that release is Close's; else the failed statement's
// error (the connection is then closed).
func (p *pin) release(ctx context.Context, endErr error) error {
	if ok, err := p.startRelease(ctx, endErr); !ok {
		return err
	}
	if endErr == ErrNotHeld && p.handoff && p.passOn() { // an Unlock, with a Lock of this Manager queued
		return nil
	}
	if !p.stopWatch() {
		return p.endErr()
	}
	if p.handle.announced.Load() { // published (Lock.Publish): see withdrawValue
		p.withdrawValue()
	}
	// Only Close's release ends with a loss: the holding's writes must not commit then.
	keep := !errors.Is(endErr, ErrLockLost)
	var err error
	if p.m.set.heartbeat > 0 { // watched (see pin_slices.go)
		err = p.unlockWatched(ctx, keep)
	} else {
		err = p.unlock(ctx, keep)
	}
	if err != nil {
		var rel *releasedError
		if errors.As(err, &rel) { // released all the same: see txLease.unlock
			p.end(!p.retire.Load(), endErr)
			return rel
		}
		failure, lost := p.unlockFailure(ctx, err)
		if lost {
			endErr = failure
		}
		p.end(false, endErr)
		return failure
	}
	p.end(!p.retire.Load(), endErr)
	if p.m.set.sharePer > 0 { // a Lock of this Manager parked for the key tries now (see wakeParked)
		p.m.hosts.wakeParked(gateKey{p.key, p.pair})
	}
	return nil
}

// startRelease moves the pin to stateReleasing for release, once a Semaphore's slot has
// settled and a caller's transaction has ended, and ends the Locks re-entered on it. It
// reports false, with what release returns, if the pin cannot be released by this call:
// it ended already, another release is under way, or ctx ended the wait for the
// transaction.
func (p *pin) startRelease(ctx context.Context, endErr error) (bool, error) {
	if p.settled.Load() != nil { // a Semaphore's slot: see settleFirst
		p.awaitSettled(ctx)
	}
	p.mu.Lock()
	if p.state == stateInTx { // a caller's transaction (BeginFunc) runs: wait for its end
		p.mu.Unlock()
		if err := p.awaitTx(ctx); err != nil {
			return false, err
		}
		p.mu.Lock()
	}
	switch p.state {
	case stateEnded:
		err := p.err
		p.mu.Unlock()
		return false, err
	case stateReleasing:
		closing := p.closing
		p.mu.Unlock()
		if closing { // the release under way is Close's: the lock ends as Close ends it
			return false, p.closedLoss()
		}
		return false, ErrNotHeld
	}
	p.state = stateReleasing
	// Re-entered Locks are part of this holding: they end first, before the server (or
	// a handoff's successor) can give the lock to anyone else.
	if p.nested != nil {
		p.endNested(endErr)
	}
	p.mu.Unlock()
	return true, nil
}

// serverEnded reports whether err is the server ending the session (a FATAL or PANIC).
func serverEnded(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC")
}

func (p *pin) endErr() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// shutdown is Close's part for one session: interrupt a wait, or release a held lock.
func (p *pin) shutdown() {
	p.mu.Lock()
	p.closing = true
	st := p.state
	switch {
	case st == stateAcquiring:
		p.cancel.Interrupt()
	case st == stateInTx && p.txFD >= 0:
		sockfd.Shutdown(p.txFD) // the transaction fails and is rolled back; see endTx
	}
	p.mu.Unlock()
	if st == stateHeld {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		p.release(ctx, p.closedLoss())
	}
}

// lose ends a held session whose connection failed.
func (p *pin) lose(cause error) {
	p.end(false, p.lossError(cause, ""))
}

// end closes the session: the connection goes back to the pool if keep, else it is
// closed. err is what Err reports from now on.
func (p *pin) end(keep bool, err error) { p.endAs(keep, false, err) }

// endAs is end; with handedOff the connection has passed to the next holding (see
// passOn): it is neither closed nor given back, and the Manager and the key's gate count
// it for that holding.
func (p *pin) endAs(keep, handedOff bool, err error) {
	p.mu.Lock()
	if p.state == stateEnded {
		p.mu.Unlock()
		return
	}
	if p.announced {
		err = p.err // the loss seen during a transaction, which Done announced already
	}
	p.state, p.err = stateEnded, err
	if p.nested != nil {
		p.nested.endAll(err)
	}
	if p.beat != nil {
		p.beat.Stop()
	}
	announced := p.announced
	p.announced = true
	dup := p.txFD // unregistered: the last transaction's endTx removed it
	p.txFD = -1
	place := p.place // a handoff has moved it to the next holding (see passOn)
	p.place = nil
	p.mu.Unlock()
	if !p.heldSince.IsZero() {
		if p.m.set.logger != nil {
			p.logEnd(err, p.heldSince)
		}
		if p.m.set.hooks.Ended != nil && !p.multi && !p.hidden.Load() {
			ev := p.event(0, time.Since(p.heldSince), endReason(err), lostErr(err))
			ev.Handoff = handedOff
			p.m.fireEnded(ev)
		}
	}
	if dup >= 0 {
		sockfd.Close(dup)
	}
	if !handedOff {
		p.giveBack(keep)
	}
	if place != nil { // after the connection went back: the next wait may take it
		p.m.hosts.givePlace(place)
	}
	if !announced {
		close(p.done) // last: when Done closes, everything the session had is given back
	}
}

// giveBack returns the ended session's connection to the pool if keep, else closes it,
// and gives back what the Manager and the key's gate counted for it.
func (p *pin) giveBack(keep bool) {
	if !keep {
		p.discard()
	}
	p.pc.Release() // pgxpool destroys a closed connection instead of keeping it
	p.m.forget(p)
	if p.gated {
		p.m.gates.sessionEnded(p)
	}
}

// lostErr is err if it is a loss, else nil: a release's ErrNotHeld is not news.
func lostErr(err error) error {
	if errors.Is(err, ErrLockLost) {
		return err
	}
	return nil
}

// discard closes the connection without returning it to the pool's idle set.
func (p *pin) discard() {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	p.pg.Close(ctx)
}

// The pin as a footing (see lock_footing.go): the Lock's session, or its transaction,
// of its own.

func (p *pin) holds() target             { return target{key: p.key, name: p.name, shared: p.shared, pair: p.pair} }
func (p *pin) doneChan() <-chan struct{} { return p.done }
func (p *pin) endOf() error              { return p.err }
func (p *pin) holding() footing          { return p }
func (p *pin) nestedSet() *nestedLocks   { return &p.nested }

// own: the pin is a session (or transaction) of the Lock's own.
func (p *pin) own(string, *Lock, bool) (*pin, error) { return p, nil }

// nestRefusal: a re-entry nests only while the pin holds its lock.
func (p *pin) nestRefusal() error {
	switch {
	case p.state == stateEnded, p.announced:
		return p.err
	case p.closing:
		return p.closedLoss()
	case p.state == stateReleasing:
		return errHoldingReleasing
	}
	return nil
}

// unlockFor is Unlock of l, the pin's own Lock: see Lock.Unlock.
func (p *pin) unlockFor(ctx context.Context, l *Lock) error {
	err := p.release(ctx, ErrNotHeld)
	if l.announced.CompareAndSwap(true, false) {
		p.m.announceReleased(gateKey{p.key, p.pair})
	}
	if err == nil || errors.Is(err, ErrNotHeld) || errors.Is(err, ErrLockLost) {
		return err
	}
	if rel := (*releasedError)(nil); errors.As(err, &rel) { // declared here: no allocation on success
		return &opError{"unlock", describe(p.key, l.name, p.pair), fmt.Errorf("the lock is released, but: %w", rel.err)}
	}
	return &opError{"unlock", describe(p.key, l.name, p.pair), fmt.Errorf("release not confirmed, connection closed: %w", err)}
}

// unlockFailure says what a failed unlock means. If the connection failed by itself (the
// session was terminated, the server went away, the network failed) rather than because
// ctx ended, the lock may have been lost before the unlock reached the server: that is a
// loss, and the caller must hear ErrLockLost. A FATAL from the server is such a failure
// even when ctx has ended too (the two raced): the server ended the session, ctx did not.
func (p *pin) unlockFailure(ctx context.Context, err error) (endErr error, lost bool) {
	if errors.Is(err, errNotHeldByServer) || serverEnded(err) || (ctx.Err() == nil && !usable(p.pg, err)) {
		return p.lossError(err, ""), true
	}
	return err, false
}

// op and describe name the session in messages: the lock it holds, or, for a Session's
// connection, the connection.
func (p *pin) op() string {
	if p.multi {
		return "session"
	}
	return "lock"
}

func (p *pin) describe() string {
	if p.multi {
		return "(backend pid " + strconv.FormatUint(uint64(p.pid), 10) + ")"
	}
	return describe(p.key, p.name, p.pair)
}

// isHeld reports whether the pin holds its lock: held, or lent to a transaction.
func (p *pin) isHeld() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return (p.state == stateHeld || p.state == stateInTx) && !p.announced
}

func (p *pin) isClosing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closing
}
