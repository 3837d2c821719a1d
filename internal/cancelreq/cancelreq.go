// Package cancelreq is a ctxwatch.Handler for a pgconn connection that interrupts a
// statement whose context ends with a PostgreSQL CancelRequest, which keeps the
// connection usable, instead of a socket deadline, which breaks it: but only while its
// owner asks for that (see [Handler]); otherwise it behaves like pgx's default handler.
//
// It exists because pgx's own CancelRequest handler
// (pgconn.CancelRequestContextWatcherHandler) does not fit a caller that must know
// exactly what a cancelled statement did: it waits before cancelling, applies to every
// statement alike, and does not say afterwards whether a cancel was sent (a cancel that
// arrives late may strike the connection's next statement). This one sends at once,
// resends while the statement runs, bounds it all with a fallback deadline, and reports
// at [Handler.Settle] whether a cancel was sent. It knows nothing of what the statements
// do.
package cancelreq

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
)

// Handler is the ctxwatch.Handler of one connection (see pgconn.Config's
// BuildContextWatcherHandler).
//
// When the context of a statement ends, Handler sends a CancelRequest at once if its
// owner marked the statement (see [Handler.SetWaiting] and [Handler.SetGentle]), and arms
// a fallback socket deadline of grace: the server answers 57014 within about a
// millisecond and the connection stays usable, so the owner can go on using it, and ask
// the server what the statement did. pgx's own CancelRequest handler waits 100 ms more on
// purpose; this one does not, and its owner deals with a late-arriving cancel instead
// (see [Handler.Settle]). For an unmarked statement it behaves like pgx's default: an
// immediate socket deadline, after which the connection is broken.
//
// The marks are set by the connection's owner, which runs one statement at a time; the
// other methods are safe to call from any goroutine.
type Handler struct {
	pg      *pgconn.PgConn
	grace   time.Duration
	gentle  atomic.Bool // see SetGentle
	waiting atomic.Bool // see SetWaiting

	mu       sync.Mutex
	inFlight chan struct{} // closed when the cancelling goroutine is done; nil if none
	stop     chan struct{} // closed to tell that goroutine the statement has returned
	sent     bool          // a CancelRequest was sent since the last Settle
}

var _ ctxwatch.Handler = (*Handler)(nil)

// resendEvery is how often an interrupt repeats its CancelRequest while the statement has
// not returned. A CancelRequest that reaches the backend before it has started the
// statement (still reading it from the client) is ignored by PostgreSQL; only a repeat
// can stop the wait then. The fallback deadline (grace) still bounds it all.
const resendEvery = 100 * time.Millisecond

// New returns the Handler of pg, whose cancels are bounded by a fallback socket deadline
// of grace.
func New(pg *pgconn.PgConn, grace time.Duration) *Handler {
	return &Handler{pg: pg, grace: grace}
}

// SetWaiting marks (on) or unmarks the statement about to run as one to interrupt with a
// CancelRequest, typically a statement that waits on the server for as long as its
// context allows. Its owner sets it just before the statement and clears it after.
func (h *Handler) SetWaiting(on bool) { h.waiting.Store(on) }

// SetGentle marks (on) or unmarks every statement from now on as one to interrupt with a
// CancelRequest, for a span of statements (a caller's transaction, say) after which the
// connection must survive a cancelled context.
func (h *Handler) SetGentle(on bool) { h.gentle.Store(on) }

// HandleCancel implements ctxwatch.Handler.
func (h *Handler) HandleCancel(context.Context) {
	if h.waiting.Load() || h.gentle.Load() {
		h.Interrupt()
		return
	}
	h.pg.Conn().SetDeadline(time.Now())
}

// HandleUnwatchAfterCancel implements ctxwatch.Handler.
func (h *Handler) HandleUnwatchAfterCancel() {
	h.wait()
	h.pg.Conn().SetDeadline(time.Time{})
}

// Interrupt asks the server to cancel the statement running on the connection, and asks
// again every resendEvery until the statement returns (see wait) or grace has passed,
// when the fallback socket deadline breaks the connection. It does not block. It is safe
// to call from any goroutine, and more than once; HandleCancel calls it for a marked
// statement, and an owner may call it to stop a statement whatever its context.
func (h *Handler) Interrupt() {
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

func (h *Handler) cancelUntil(deadline time.Time, stop <-chan struct{}, done chan<- struct{}) {
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
func (h *Handler) wait() {
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

// Settle is called by the statement's owner once the statement returned. It waits for a
// pending CancelRequest, clears the fallback deadline, and reports whether a cancel was
// sent since the last Settle, in which case the next statement on the connection may
// still be hit by it: the owner must spend it (or find it missed) on a harmless statement
// before running one that matters.
func (h *Handler) Settle() (sent bool) {
	h.wait()
	h.mu.Lock()
	sent, h.sent = h.sent, false
	h.mu.Unlock()
	if sent {
		h.pg.Conn().SetDeadline(time.Time{})
	}
	return sent
}
