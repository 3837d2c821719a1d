package advisory

import (
	"context"
	"errors"
	"fmt"

	"github.com/pgadvisory/advisory/internal/sockfd"
)

// The held connection lent by the watcher to a caller's transaction (see pin_tx.go) or to
// a statement of the library (onHeld), and given back: beginTx, endTx and the waits and
// the hang-up watch between them.

// beginTx takes the held session's connection from the watcher for a transaction, and
// has the poller watch it for a hang-up. It waits (bounded by ctx) for a transaction
// already running on it. It fails with the session's end error if it has ended, and
// with ErrNotHeld if it is being released.
func (p *pin) beginTx(ctx context.Context) error {
	if err := p.waitTx(ctx, func() bool { return p.state == stateHeld && !p.closing }); err != nil {
		return err
	}
	p.state, p.txDone = stateInTx, make(chan struct{}) // p.mu is locked: see waitTx
	p.mu.Unlock()
	if !p.stopWatch() {
		p.closeTxDone()
		return p.endErr()
	}
	p.mu.Lock()
	if p.txFD < 0 { // kept for the next transaction, until the session ends (see end)
		if fd, err := sockfd.Dup(p.pg.Conn()); err == nil {
			p.txFD = fd
		}
	}
	p.watchForHangup()
	closing := p.closing
	p.mu.Unlock()
	if closing { // Close began before the socket could be shut down: see shutdown
		return p.endTx(nil)
	}
	p.cancel.SetGentle(true)
	return nil
}

// watchForHangup has the poller watch the connection during a transaction, for a hang-up
// or an error only, never for input, which is the transaction's (see
// sockwatch.Watcher.AddHangup). It watches txFD, the session's own duplicate of the
// socket's descriptor: the caller's statements may make pgx close the connection's
// descriptor at any time, but the duplicate's number stays the session's until it closes
// it (see end), after endTx removed the registration. The caller holds p.mu.
func (p *pin) watchForHangup() {
	if p.txFD < 0 || p.m.poller == nil {
		return
	}
	if reg, err := p.m.poller.AddHangup(p.txFD, p); err == nil {
		p.polled = reg
		p.watch = watchHangup
	}
}

// txBusy says what keeps beginTx (and release, see awaitTx) from taking the connection:
// a channel to wait on, or an error to return. The caller holds p.mu.
func (p *pin) txBusy() (<-chan struct{}, error) {
	switch {
	case p.state == stateEnded:
		return nil, p.err
	case p.announced:
		return nil, p.err // lost during a transaction that has not yet returned
	case p.closing:
		return nil, p.closedLoss()
	case p.state == stateInTx:
		return p.txDone, nil
	}
	return nil, ErrNotHeld
}

// awaitTx waits, bounded by ctx, until no transaction runs on the connection, for a
// release. It returns the loss if the session was lost during the transaction.
func (p *pin) awaitTx(ctx context.Context) error {
	if err := p.waitTx(ctx, func() bool { return p.state != stateInTx }); err != nil {
		return err
	}
	p.mu.Unlock()
	return nil
}

// waitTx waits, bounded by ctx, until ready (called under p.mu) reports true, and returns
// nil with p.mu still locked; or it returns what keeps it from waiting (see txBusy), or
// ctx's error, with p.mu unlocked.
func (p *pin) waitTx(ctx context.Context, ready func() bool) error {
	for {
		p.mu.Lock()
		if ready() {
			return nil
		}
		wait, err := p.txBusy()
		p.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("advisory: waiting for the transaction in progress on %s: %w", p.describe(), ctx.Err())
		}
	}
}

// onHeld runs the library's statement stmt on the held connection, between beginTx and
// endTx: it waits, bounded by ctx, until the connection is free (no BeginFunc, Token or
// drain on it), then runs stmt. ended is the session's end error if the lock ended (or
// beginTx failed) meanwhile; else err is stmt's error.
func (p *pin) onHeld(ctx context.Context, stmt func() error) (err, ended error) {
	if err := p.beginTx(ctx); err != nil {
		return nil, err
	}
	err = stmt()
	if lerr := p.endTx(err); lerr != nil {
		return nil, lerr
	}
	return err, nil
}

// endTx takes the connection back after a transaction and hands it to the watcher, or
// ends the session if it was lost, Close began, or the connection is not clean (pgx
// closed it, or a transaction is still open): cause is the transaction's last error,
// for the message. It returns nil, or the session's end error.
func (p *pin) endTx(cause error) error { return p.endTxAs(cause, " during a transaction") }

// endTxAs is endTx for a statement the library ran (see pin_heartbeat.go): where says,
// for a loss's message, when it was seen.
func (p *pin) endTxAs(cause error, where string) error {
	p.cancel.SetGentle(false)
	sent := p.cancel.Settle()
	p.mu.Lock()
	p.m.poller.Remove(&p.polled) // nothing if not registered
	p.watch = watchNone
	lost, closing := p.announced, p.closing
	p.mu.Unlock()
	clean := !lost && !closing && !p.pg.IsClosed() && p.pg.TxStatus() == p.lease.idle()
	if clean && sent {
		clean = p.absorbCancel() == nil
	}
	if !clean {
		err := p.closedLoss()
		if !closing {
			if cause == nil {
				cause = errors.New("the connection was left unusable")
			}
			err = p.lossError(cause, where)
		}
		p.end(false, err)
		p.closeTxDone()
		return p.endErr()
	}
	p.mu.Lock()
	p.watchIdle()
	p.mu.Unlock()
	p.closeTxDone()
	return nil
}

func (p *pin) closeTxDone() {
	p.mu.Lock()
	ch := p.txDone
	p.txDone = nil
	p.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// hungUp is the poller's report, during a transaction, that the connection hung up or
// failed: the session, and so the lock, is gone. It shuts the socket down so that the
// transaction's statements fail at once, and closes Done. The connection is given back
// when the transaction returns (endTx). The caller holds p.mu.
func (p *pin) hungUp() {
	p.watch = watchNone // the one-shot registration fired; endTx removes it
	cause := sockfd.Err(p.txFD)
	if cause == nil {
		cause = errPeerClosed
		if e := pendingError(p.txFD); e != nil { // why the peer closed, if it said (see loss_peek.go)
			cause = e
		}
	}
	sockfd.Shutdown(p.txFD)
	p.err = p.lossError(cause, " (seen during a transaction)")
	if p.closing { // the hang-up is shutdown's own
		p.err = p.closedLoss()
	}
	p.announced = true
	p.nested.endAll(p.err)
	close(p.done)
}
