package advisory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// waitRow runs one of the pin's statements (see pin.row) as a lock wait: cancelling ctx
// interrupts it with a CancelRequest, which keeps the connection usable, instead of a
// socket deadline, which breaks it. The mark is the connection's handler's, set only
// while the statement runs (the pin's owner runs one statement at a time): marking the
// ctx instead cost an allocation and a ctx.Value walk per Lock.
func (s *pin) waitRow(ctx context.Context, sql string, keyInText bool) (uint32, *bool, error) {
	s.cancel.waiting.Store(true)
	defer s.cancel.waiting.Store(false)
	return s.row(ctx, sql, keyInText)
}

// handlerKey is where a connection's cancelHandler is kept in PgConn.CustomData.
const handlerKey = "advisory.cancelHandler"

// cancelHandler is the ctxwatch.Handler of every connection of a Manager's pool.
//
// For a lock wait (see waitRow) it sends a CancelRequest at once and arms a fallback socket
// deadline of grace: the server answers 57014 within about a millisecond and the
// connection stays usable, so the caller can ask the server, on the same session,
// whether the grant won the race against the cancel. pgx's own CancelRequest handler
// waits 100 ms more on purpose; we do not, and deal with a late-arriving cancel instead
// (see session.reconcile). It does the same for every statement of a caller's
// transaction on a held lock's connection (BeginFunc), so that a cancelled statement
// fails the transaction but keeps the connection, and with it the lock. For any other
// statement it behaves like pgx's default: an immediate socket deadline, after which the
// session discards the connection.
type cancelHandler struct {
	pg      *pgconn.PgConn
	grace   time.Duration
	gentle  atomic.Bool // a caller's transaction runs on a held lock's connection: see pin.beginTx
	waiting atomic.Bool // the statement running is a lock wait: see pin.waitRow

	mu       sync.Mutex
	inFlight chan struct{} // closed when the cancelling goroutine is done; nil if none
	stop     chan struct{} // closed to tell that goroutine the statement has returned
	sent     bool          // a CancelRequest was sent since the last settle
}

// resendEvery is how often an interrupt repeats its CancelRequest while the statement has
// not returned. A CancelRequest that reaches the backend before it has started the
// statement (still reading it from the client) is ignored by PostgreSQL; only a repeat
// can stop the wait then. The fallback deadline (grace) still bounds it all.
const resendEvery = 100 * time.Millisecond

func newCancelHandler(grace time.Duration) func(*pgconn.PgConn) ctxwatch.Handler {
	return func(pg *pgconn.PgConn) ctxwatch.Handler {
		h := &cancelHandler{pg: pg, grace: grace}
		pg.CustomData()[handlerKey] = h
		return h
	}
}

func handlerOf(pg *pgconn.PgConn) *cancelHandler {
	h, _ := pg.CustomData()[handlerKey].(*cancelHandler)
	return h
}

// HandleCancel implements ctxwatch.Handler.
func (h *cancelHandler) HandleCancel(ctx context.Context) {
	if h.waiting.Load() || h.gentle.Load() {
		h.interrupt()
		return
	}
	h.pg.Conn().SetDeadline(time.Now())
}

// HandleUnwatchAfterCancel implements ctxwatch.Handler.
func (h *cancelHandler) HandleUnwatchAfterCancel() {
	h.wait()
	h.pg.Conn().SetDeadline(time.Time{})
}

// interrupt asks the server to cancel the statement running on the connection, and asks
// again every resendEvery until the statement returns (see wait) or grace has passed. It
// does not block. It is safe to call from any goroutine, and more than once.
func (h *cancelHandler) interrupt() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.inFlight != nil {
		return
	}
	h.sent = true
	deadline := time.Now().Add(h.grace)
	h.pg.Conn().SetDeadline(deadline)
	done, stop := make(chan struct{}), make(chan struct{})
	h.inFlight, h.stop = done, stop
	go h.cancelUntil(deadline, stop, done)
}

func (h *cancelHandler) cancelUntil(deadline time.Time, stop <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	resend := time.NewTimer(resendEvery)
	defer resend.Stop()
	for {
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		h.pg.CancelRequest(ctx)
		cancel()
		select {
		case <-stop:
			return
		case <-resend.C:
			if !time.Now().Before(deadline) {
				return
			}
			resend.Reset(resendEvery)
		}
	}
}

// wait tells the cancelling goroutine, if any, that the statement has returned, and
// blocks until it is done: its last CancelRequest has been delivered (the server closed
// the cancel connection, so the signal has reached the backend) or has failed. No
// CancelRequest is sent after wait returns.
func (h *cancelHandler) wait() {
	h.mu.Lock()
	done, stop := h.inFlight, h.stop
	h.stop = nil
	h.mu.Unlock()
	if done == nil {
		return
	}
	if stop != nil {
		close(stop)
	}
	<-done
	h.mu.Lock()
	h.inFlight = nil
	h.mu.Unlock()
}

// settle is called by the statement's owner once the lock statement returned. It waits
// for a pending CancelRequest, clears the fallback deadline, and reports whether a
// cancel was sent, in which case the next statement on the connection may still be hit
// by it.
func (h *cancelHandler) settle() (sent bool) {
	h.wait()
	h.mu.Lock()
	sent, h.sent = h.sent, false
	h.mu.Unlock()
	if sent {
		h.pg.Conn().SetDeadline(time.Time{})
	}
	return sent
}
