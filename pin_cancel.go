package advisory

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"

	"github.com/pgadvisory/advisory/internal/cancelreq"
)

// waitRow runs one of the pin's statements (see pin.row) as a lock wait: cancelling ctx
// interrupts it with a CancelRequest, which keeps the connection usable, instead of a
// socket deadline, which breaks it. The mark is the connection's handler's, set only
// while the statement runs (the pin's owner runs one statement at a time): marking the
// ctx instead cost an allocation and a ctx.Value walk per Lock.
func (p *pin) waitRow(ctx context.Context, sql string, keyInText bool) (uint32, *bool, error) {
	p.cancel.SetWaiting(true)
	defer p.cancel.SetWaiting(false)
	return p.row(ctx, sql, keyInText)
}

// handlerKey is where a connection's cancel handler is kept in PgConn.CustomData.
const handlerKey = "advisory.cancelHandler"

// newCancelHandler builds the ctxwatch.Handler of every connection of a Manager's pool: a
// cancelreq.Handler, whose fallback deadline is the cancel grace (see WithCancelGrace).
//
// The policy is the root's: which statements a cancelled ctx interrupts with a
// CancelRequest. A lock wait (see waitRow) is, so that the caller can ask the server, on
// the same session, whether the grant won the race against the cancel (see
// pin.reconcile). So is every statement of a caller's transaction on a held lock's
// connection (BeginFunc; see pin.beginTx), so that a cancelled statement fails the
// transaction but keeps the connection, and with it the lock. Any other statement gets
// an immediate socket deadline, after which the session discards the connection.
func newCancelHandler(grace time.Duration) func(*pgconn.PgConn) ctxwatch.Handler {
	return func(pg *pgconn.PgConn) ctxwatch.Handler {
		h := cancelreq.New(pg, grace)
		pg.CustomData()[handlerKey] = h
		return h
	}
}

func handlerOf(pg *pgconn.PgConn) *cancelreq.Handler {
	h, _ := pg.CustomData()[handlerKey].(*cancelreq.Handler)
	return h
}
