package advisory

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// BeginFunc on a transaction holding. The lock lives exactly as long as its transaction,
// so fn cannot have a transaction of its own: it runs in a savepoint of the holding's
// (advisory_fn), and its writes commit with the holding, at Unlock. That is fencing at
// its strictest: the writes commit only if the lock was held through their commit, and a
// holding lost before its Unlock takes them with it.

// fnSavepoint is the savepoint fn runs in.
const fnSavepoint = "advisory_fn"

func (txLease) beginFn(p *pin, ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error) {
	if opts != (pgx.TxOptions{}) {
		return nil, fmt.Errorf("%w: BeginTxFunc with transaction options (%+v): the lock's transaction began "+
			"with the lock, under READ COMMITTED; fn runs in a savepoint of it", ErrTransactionHolding, opts)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	// pgx's transaction object, begun with the savepoint instead of BEGIN: its statements
	// and its nested savepoints (tx.Begin) are pgx's; only its end is ours (see
	// savepointTx). Not under ctx, as begin's BEGIN, but bounded as it is (see pin.begin).
	begin := "SAVEPOINT " + fnSavepoint
	if p.sliced() > 0 { // the holding's waits set lock_timeout to their slice: fn's has none
		begin += "; SET LOCAL lock_timeout = 0"
	}
	bctx, stop := p.afterGrace(ctx)
	tx, err := p.pc.BeginTx(bctx, pgx.TxOptions{BeginQuery: begin})
	stop()
	if err != nil {
		return nil, err
	}
	return &savepointTx{Tx: tx}, nil
}

// commitFn releases fn's savepoint: its writes now wait in the holding's transaction for
// the holding's COMMIT (see txLease.unlock). Nothing is committed yet.
func (txLease) commitFn(p *pin, ctx context.Context, tx pgx.Tx) (bool, error) {
	if p.pg.TxStatus() == 'E' {
		// A statement of fn failed and fn returned nil. As pgx's Commit of a failed
		// transaction does, roll fn's work back: to its savepoint, which keeps the holding
		// and the writes of earlier BeginFuncs (the holding's transaction is usable again).
		if err := rollback(tx); err != nil {
			return false, err
		}
		return false, fmt.Errorf("advisory: a statement of the fenced work failed, and its work was rolled back "+
			"to its savepoint (the lock and earlier writes are kept): %w", pgx.ErrTxCommitRollback)
	}
	// RELEASE, not under ctx (fn returned nil with ctx live), bounded as a COMMIT is.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	if err := tx.Commit(cctx); err != nil {
		return false, err
	}
	p.dirty = true
	return false, nil
}

// savepointTx is the pgx.Tx fn gets on a transaction holding: pgx's own, whose Commit
// releases the savepoint and whose Rollback rolls back to it, instead of ending the
// holding's transaction. Calling either twice returns pgx.ErrTxClosed.
type savepointTx struct {
	pgx.Tx
	ended bool
}

// Commit releases the savepoint: fn's writes stay, to commit with the holding.
func (t *savepointTx) Commit(ctx context.Context) error {
	return t.end(ctx, "RELEASE SAVEPOINT "+fnSavepoint)
}

// Rollback undoes fn's writes and leaves the holding's transaction as it was before fn.
func (t *savepointTx) Rollback(ctx context.Context) error {
	return t.end(ctx, "ROLLBACK TO SAVEPOINT "+fnSavepoint+"; RELEASE SAVEPOINT "+fnSavepoint)
}

func (t *savepointTx) end(ctx context.Context, sql string) error {
	if t.ended {
		return pgx.ErrTxClosed
	}
	t.ended = true
	_, err := t.Conn().Exec(ctx, sql)
	return err
}
