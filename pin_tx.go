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
func (s *pin) runTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	if err := s.beginTx(ctx); err != nil {
		return err
	}
	var tx pgx.Tx
	returned := false
	defer func() {
		if !returned { // fn panicked or called runtime.Goexit: roll back, keep the lock
			s.endTx(rollback(tx))
		}
	}()
	committed, err := s.inTx(ctx, opts, fn, &tx)
	returned = true
	err = withCtxErr(ctx, err) // a statement the server cancelled for ctx
	if lerr := s.endTx(err); lerr != nil && !committed {
		if err != nil && !errors.Is(err, ErrLockLost) {
			return fmt.Errorf("%w (the transaction failed: %w)", lerr, err)
		}
		return lerr
	}
	return err
}

// inTx begins, runs fn and commits or rolls back. It reports whether the commit succeeded.
func (s *pin) inTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error, txp *pgx.Tx) (bool, error) {
	tx, err := s.begin(ctx, opts)
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
	clearWarning(s.pg)
	if err := tx.Commit(cctx); err != nil && !errors.Is(err, pgx.ErrTxClosed) {
		return false, err
	}
	if n := takeWarning(s.pg); n != nil {
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
func (s *pin) begin(ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// BEGIN never waits on the server; a stalled network fails it within the keepalive
	// bound. So no timer: an uncancellable ctx also spares pgx's context watcher.
	tx, err := s.pc.BeginTx(context.WithoutCancel(ctx), opts)
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
func (s *pin) beginTx(ctx context.Context) error {
	if err := s.waitTx(ctx, func() bool { return s.state == stateHeld && !s.closing }); err != nil {
		return err
	}
	s.state, s.txDone = stateInTx, make(chan struct{}) // s.mu is locked: see waitTx
	s.mu.Unlock()
	if !s.stopWatch() {
		s.closeTxDone()
		return s.endErr()
	}
	s.mu.Lock()
	if s.txFD < 0 { // kept for the next transaction, until the session ends (see end)
		if fd, err := sockfd.Dup(s.pg.Conn()); err == nil {
			s.txFD = fd
		}
	}
	s.watchForHangup()
	closing := s.closing
	s.mu.Unlock()
	if closing { // Close began before the socket could be shut down: see shutdown
		return s.endTx(nil)
	}
	s.cancel.SetGentle(true)
	return nil
}

// watchForHangup has the poller watch the connection during a transaction, for a hang-up
// or an error only, never for input, which is the transaction's (see
// sockwatch.Watcher.AddHangup). It watches txFD, the session's own duplicate of the
// socket's descriptor: the caller's statements may make pgx close the connection's
// descriptor at any time, but the duplicate's number stays the session's until it closes
// it (see end), after endTx removed the registration. The caller holds s.mu.
func (s *pin) watchForHangup() {
	if s.txFD < 0 || s.m.poller == nil {
		return
	}
	if reg, err := s.m.poller.AddHangup(s.txFD, s); err == nil {
		s.polled, s.watch = reg, watchHangup
	}
}

// txBusy says what keeps beginTx (and release, see awaitTx) from taking the connection:
// a channel to wait on, or an error to return. The caller holds s.mu.
func (s *pin) txBusy() (<-chan struct{}, error) {
	switch {
	case s.state == stateEnded:
		return nil, s.err
	case s.announced:
		return nil, s.err // lost during a transaction that has not yet returned
	case s.closing:
		return nil, s.closedLoss()
	case s.state == stateInTx:
		return s.txDone, nil
	}
	return nil, ErrNotHeld
}

// awaitTx waits, bounded by ctx, until no transaction runs on the connection, for a
// release. It returns the loss if the session was lost during the transaction.
func (s *pin) awaitTx(ctx context.Context) error {
	if err := s.waitTx(ctx, func() bool { return s.state != stateInTx }); err != nil {
		return err
	}
	s.mu.Unlock()
	return nil
}

// waitTx waits, bounded by ctx, until ready (called under s.mu) reports true, and returns
// nil with s.mu still locked; or it returns what keeps it from waiting (see txBusy), or
// ctx's error, with s.mu unlocked.
func (s *pin) waitTx(ctx context.Context, ready func() bool) error {
	for {
		s.mu.Lock()
		if ready() {
			return nil
		}
		wait, err := s.txBusy()
		s.mu.Unlock()
		if err != nil {
			return err
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return fmt.Errorf("advisory: waiting for the transaction in progress on %s: %w", s.describe(), ctx.Err())
		}
	}
}

// endTx takes the connection back after a transaction and hands it to the watcher, or
// ends the session if it was lost, Close began, or the connection is not clean (pgx
// closed it, or a transaction is still open): cause is the transaction's last error,
// for the message. It returns nil, or the session's end error.
func (s *pin) endTx(cause error) error {
	s.cancel.SetGentle(false)
	sent := s.cancel.Settle()
	s.mu.Lock()
	s.m.poller.Remove(&s.polled) // nothing if not registered
	s.watch = watchNone
	lost, closing := s.announced, s.closing
	s.mu.Unlock()
	clean := !lost && !closing && !s.pg.IsClosed() && s.pg.TxStatus() == 'I'
	if clean && sent {
		clean = s.absorbCancel() == nil
	}
	if !clean {
		err := s.closedLoss()
		if !closing {
			if cause == nil {
				cause = errors.New("the connection was left unusable")
			}
			err = s.lossError(cause, " during a transaction")
		}
		s.end(false, err)
		s.closeTxDone()
		return s.endErr()
	}
	s.mu.Lock()
	s.watchIdle()
	s.mu.Unlock()
	s.closeTxDone()
	return nil
}

func (s *pin) closeTxDone() {
	s.mu.Lock()
	ch := s.txDone
	s.txDone = nil
	s.mu.Unlock()
	if ch != nil {
		close(ch)
	}
}

// hungUp is the poller's report, during a transaction, that the connection hung up or
// failed: the session, and so the lock, is gone. It shuts the socket down so that the
// transaction's statements fail at once, and closes Done. The connection is given back
// when the transaction returns (endTx). The caller holds s.mu.
func (s *pin) hungUp() {
	s.watch = watchNone // the one-shot registration fired; endTx removes it
	cause := sockfd.Err(s.txFD)
	if cause == nil {
		cause = errPeerClosed
	}
	sockfd.Shutdown(s.txFD)
	s.err = s.lossError(cause, " (seen during a transaction)")
	if s.closing { // the hang-up is shutdown's own
		s.err = s.closedLoss()
	}
	s.announced = true
	close(s.done)
}
