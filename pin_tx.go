package advisory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
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
			p.inFn.Store(false)
			p.endTx(rollback(tx))
		}
	}()
	p.inFn.Store(true)
	committed, err := p.inTx(ctx, opts, fn, &tx)
	p.inFn.Store(false)
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

// inTx begins, runs fn and commits or rolls back (as the pin's lease does: see
// lease.beginFn). It reports whether fn's writes are committed.
func (p *pin) inTx(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error, txp *pgx.Tx) (bool, error) {
	tx, err := p.lease.beginFn(p, ctx, opts)
	if err != nil {
		return false, err
	}
	*txp = tx
	g := guard(tx)
	if err := fn(g); err != nil {
		rollback(tx)
		return false, err
	}
	if p.pg.TxStatus() == 'I' { // ended through tx.Conn(): see endedByWork
		*txp = nil
		return false, p.endedByWork()
	}
	if err := g.failed(); err != nil {
		rollback(tx)
		return false, fmt.Errorf("advisory: the fenced work was rolled back (fn returned nil after a refused "+
			"statement): %w", err)
	}
	if err := ctx.Err(); err != nil {
		rollback(tx)
		return false, err
	}
	return p.lease.commitFn(p, ctx, tx)
}

// endedByWork is inTx's error when fn's work ended the transaction itself, through
// statements the guard could not read (tx.Conn()). On a transaction holding that ended
// the lock: the error is the loss's cause (endTx finds the connection out of its holding
// transaction and ends the holding). On a session holding the lock is kept, but the
// statements fn sent after that end ran unfenced.
func (p *pin) endedByWork() error {
	if p.lease.kind() == HoldingTransaction {
		return errWorkEndedTx
	}
	return errors.New("advisory: fenced work ended its transaction itself (a COMMIT or ROLLBACK sent through " +
		"tx.Conn()): what it ran after that was not fenced")
}

// commit commits tx, a transaction of its own on the held session (see begin), and
// reports whether it committed. COMMIT is sent as BEGIN is, not under ctx: ctx ending
// between the caller's check and the send would make pgx close the connection, losing
// the lock for nothing. A COMMIT can wait on the server (synchronous replication): 5 s
// bound it, after which the server is asked to cancel the wait (the commit stays, with a
// warning). An uncancellable ctx (the caller asked for no bound) is used as it is,
// sparing a timer.
func (p *pin) commit(ctx context.Context, tx pgx.Tx) (bool, error) {
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
	// BEGIN never waits on a healthy server; a stalled network fails it within the
	// keepalive bound; a hung server (a frozen backend, or one behind a proxy that answers
	// the keepalives) is bounded by ctx plus the cancel grace (see afterGrace).
	bctx, stop := p.afterGrace(ctx)
	tx, err := p.pc.BeginTx(bctx, opts)
	stop()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, errors.Join(err, rollback(tx))
	}
	return tx, nil
}

// afterGrace returns the context for a statement that must not be interrupted when ctx
// ends (BEGIN, a savepoint's; see begin), but must not outlive it on a hung server
// either: it ends the cancel grace (WithCancelGrace) after ctx ends, as a statement
// interrupted by ctx would (see pin_lock.go's cancel handler), and never if ctx cannot
// end. stop releases it.
func (p *pin) afterGrace(ctx context.Context) (context.Context, func()) {
	if ctx.Done() == nil {
		return ctx, func() {}
	}
	gctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	stopAfter := context.AfterFunc(ctx, func() {
		grace := time.NewTimer(p.m.set.cancelGrace)
		defer grace.Stop()
		select {
		case <-grace.C:
			cancel()
		case <-gctx.Done(): // stopped
		}
	})
	return gctx, func() { stopAfter(); cancel() }
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
