package advisory

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory/internal/sockfd"
)

// A caller's transaction on a held lock's connection (Lock.BeginFunc, Session.BeginFunc)
// takes the connection from the watcher for its duration, and gives it back after.
// Meanwhile the poller still watches the socket, for a hang-up only (see watchForHangup):
// the server ending the session (pg_terminate_backend, a shutdown) or the network failing
// closes Done at once, even while fn does other work, and makes every later statement of
// the transaction fail, so nothing commits after a loss.

// errPeerClosed is the cause of a loss seen as the server closing the connection.
var errPeerClosed = errors.New("the server closed the connection")

// runTx runs fn in a transaction on the held session's connection. It commits if fn
// returns nil and ctx has not ended. It returns the session's end error (wrapping
// ErrLockLost) if the session ended before or during the transaction, unless the commit
// succeeded: a commit on the session proves it held the lock then.
func (p *pin) runTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	if err := p.beginTx(ctx); err != nil {
		return err
	}
	var tx pgx.Tx
	returned := false
	defer func() {
		if !returned { // fn panicked or called runtime.Goexit: roll back, keep the lock
			p.endTx(rollback(tx))
		}
	}()
	committed, err := p.inTx(ctx, opts, fn, &tx)
	returned = true
	err = withCtxErr(ctx, err) // a statement the server cancelled for ctx
	if lerr := p.endTx(err); lerr != nil && !committed {
		if err != nil && !errors.Is(err, ErrLockLost) {
			return fmt.Errorf("%w (the transaction failed: %w)", lerr, err)
		}
		return lerr
	}
	return err
}

// inTx begins, runs fn and commits or rolls back. It reports whether the commit succeeded.
func (p *pin) inTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error, txp *pgx.Tx) (bool, error) {
	tx, err := p.begin(ctx, opts)
	if err != nil {
		return false, err
	}
	*txp = tx
	if err := fn(tx); err != nil {
		rollback(tx)
		return false, err
	}
	if err := ctx.Err(); err != nil {
		rollback(tx)
		return false, err
	}
	// COMMIT is sent as BEGIN is, not under ctx: ctx ending between the check above and
	// the send would make pgx close the connection, losing the lock for nothing.
	// A COMMIT can wait on the server (synchronous replication): 5 s bound it, after which
	// the server is asked to cancel the wait (the commit stays, with a warning). An
	// uncancellable ctx (the caller asked for no bound) is used as it is, sparing a timer.
	cctx := ctx
	if ctx.Done() != nil {
		var cancel context.CancelFunc
		cctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
	}
	clearWarning(p.pg)
	if err := tx.Commit(cctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return false, err
	}
	if n := takeWarning(p.pg); n != nil {
		return true, unconfirmed("the transaction's commit", n)
	}
	return true, nil
}

// begin sends BEGIN, if ctx has not ended. Not under ctx itself: pgx closes the
// connection, and so frees the lock, when BEGIN fails with anything but a server error,
// "context already done" included, which a ctx ending at the wrong instant would cause.
// BEGIN is one round trip that never waits on the server; the client keepalive bounds it
// if the network stalls. If ctx ended meanwhile, the transaction is rolled back and
// ctx's error returned.
func (p *pin) begin(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// BEGIN never waits on the server; a stalled network fails it within the keepalive
	// bound. So no timer: an uncancellable ctx also spares pgx's context watcher.
	tx, err := p.pc.BeginTx(context.WithoutCancel(ctx), opts)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(err, rollback(tx))
	}
	return tx, nil
}

// withCtxErr makes err, the error of a statement that failed after ctx ended (the server
// cancelled it, 57014), also wrap ctx's error, so that errors.Is(err, ctx.Err()) holds.
func withCtxErr(ctx context.Context, err error) error {
	if err != nil && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		return fmt.Errorf("%w: %w", ctx.Err(), err)
	}
	return err
}

// rollback rolls tx back (nil: nothing to do), bounded by cleanupTimeout: the caller's
// ctx may have ended. If it fails, pgx closes the connection, which ends the session.
func rollback(tx pgx.Tx) error {
	if tx == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := tx.Rollback(ctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return err
	}
	return nil
}

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
		p.polled, p.watch = reg, watchHangup
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
	clean := !lost && !closing && !p.pg.IsClosed() && p.pg.TxStatus() == 'I'
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
	}
	sockfd.Shutdown(p.txFD)
	p.err = p.lossError(cause, " (seen during a transaction)")
	if p.closing { // the hang-up is shutdown's own
		p.err = p.closedLoss()
	}
	p.announced = true
	close(p.done)
}
