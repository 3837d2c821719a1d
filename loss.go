package advisory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory/internal/sockfd"
)

// watchMode says who watches a held session's idle connection.
type watchMode int

const (
	watchNone    watchMode = iota
	watchPolled            // the Manager's poller (epoll); no goroutine of its own
	watchReading           // the session's readUntilLoss goroutine
	watchHangup            // the poller, for a hang-up only, while a transaction runs
)

// aLongTimeAgo is a read deadline in the past: it wakes a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

// hold hands the connection to the watcher: the Manager's poller where there is one,
// else a reader goroutine. It refuses once Close has begun.
func (p *pin) hold() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closing {
		return false
	}
	p.heldSince = time.Now()
	p.grantedAt = p.heldSince
	p.watchIdle()
	p.startBeat()
	return true
}

// watchIdle makes the session held and starts its watcher at once: the Manager's poller,
// or without one a reader goroutine (see register). The caller holds p.mu.
//
// From the grant, not later: a holding whose registration waited for a timer (an
// "armer" registering, at its next tick, the sessions still held a millisecond after
// their grant, which saved a lock released sooner its two epoll_ctl) left a session
// ended in that millisecond unwatched, its lock possibly free before Done closed, and
// its timer cost more than the calls it saved: a timer that fires every millisecond
// wakes a thread each time, and with the client on one core beside its server a 1 ms
// ticker alone made raw pgx's cycle 1.2x slower (issue 47; docs/benchmarks.md).
func (p *pin) watchIdle() {
	p.state = stateHeld
	p.register()
}

// register has the poller watch the held session, or, without one, a reader goroutine.
// The caller holds p.mu.
//
// The poller's registration is one-shot: the first event hands the session to its
// reader. Descriptor numbers are reused as soon as a socket is closed, so the poller must
// only ever be given s.fd while that number is certainly s's socket. The rule that
// ensures it: a session is registered only while it is in watchPolled mode, and in that
// mode nobody reads from or closes its connection (the poller does no I/O on it). Both
// ways out of watchPolled, SocketEvent and stopWatch, remove the registration under p.mu
// before anyone else may touch the connection. The reader goroutine, which may see the
// connection fail and close it, starts only after that.
func (p *pin) register() {
	if p.m.poller != nil {
		if reg, err := p.m.poller.Add(p.fd, p); err == nil {
			p.polled = reg
			p.watch = watchPolled
			return
		}
	}
	p.startReader()
}

// startReader hands the connection to a new reader goroutine, with a fresh channel for
// its exit: a Session's connection may go to a reader and back once per call. The caller
// holds p.mu.
func (p *pin) startReader() {
	p.watch = watchReading
	p.stopping.Store(false)
	p.watchDone = make(chan struct{})
	go p.readUntilLoss(p.watchDone)
}

// SocketEvent is called by the poller (it implements sockwatch.Handler) when the held
// session's socket became readable or hung up. The reader goroutine takes over and reads
// what came.
func (p *pin) SocketEvent() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watch == watchHangup {
		p.hungUp()
		return
	}
	if p.watch != watchPolled {
		return // stopWatch took the connection back first
	}
	p.m.poller.Remove(&p.polled) // before the reader may close the socket: see watchIdle
	p.startReader()
}

// readUntilLoss blocks reading the idle connection, so a FIN, an RST, a FATAL message from
// pg_terminate_backend or a shutdown, or a keepalive abort is seen the moment the kernel
// sees it. Nothing is sent: no ping loop. A notification or notice makes the read return
// nil; it simply reads again.
func (p *pin) readUntilLoss(exited chan<- struct{}) {
	defer close(exited)
	for {
		err := p.pg.WaitForNotification(context.Background())
		if err == nil {
			continue
		}
		if p.stopping.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		p.lose(err)
		return
	}
}

// stopWatch takes the connection back from the watcher. It reports false if the watcher
// had already found the session lost.
func (p *pin) stopWatch() bool {
	p.mu.Lock()
	mode, exited := p.watch, p.watchDone
	p.watch = watchNone
	if mode == watchPolled {
		p.m.poller.Remove(&p.polled) // the socket is open: nobody else touches it in this mode
	}
	p.mu.Unlock()
	if mode != watchReading {
		return true
	}
	p.stopping.Store(true)
	p.pg.Conn().SetReadDeadline(aLongTimeAgo)
	<-exited
	p.mu.Lock()
	lost := p.state == stateEnded
	p.mu.Unlock()
	if lost {
		return false
	}
	p.pg.Conn().SetReadDeadline(time.Time{})
	return true
}

// lossCause says why a held connection failed: a short code, the Reason of a Hooks
// event (see endReason), and the same in words, for messages. A loss is classified once,
// where it is seen (see lossError).
func lossCause(err error) (code, words string) {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "57P01":
		return "terminated", "the server terminated the session (pg_terminate_backend or shutdown)"
	case errors.As(err, &pgErr) && (pgErr.Code == "25P03" || pgErr.Code == "25P04" || idleTransactionTimeout(pgErr)):
		return "timeout", timeoutWords(pgErr)
	case errors.Is(err, errWorkEndedTx):
		return "work_ended_tx", errWorkEndedTx.Error()
	case errors.As(err, &pgErr):
		return "server_closed", "the server ended the session"
	case errors.As(err, new(*silentBeat)):
		return "keepalive", "the path to the server went silent: a heartbeat got no answer (a partition, or a proxy " +
			"cut off from the server)"
	case sockfd.TimedOut(err):
		return "keepalive", "the network went silent past the keepalive limit (partition or host down)"
	case sockfd.Reset(err):
		return "reset", "the connection was reset"
	case errors.Is(err, errNotHeldByServer):
		return "connection_failed", "the session no longer held it"
	case errors.Is(err, errPeerClosed):
		return "terminated", "the server closed the connection (pg_terminate_backend or shutdown)"
	}
	return "connection_failed", "the connection failed"
}

// idleTransactionTimeout reports PgBouncer's idle_transaction_timeout ending a client
// that stayed idle in a transaction (it sends a FATAL 08P01 "idle transaction timeout").
func idleTransactionTimeout(e *pgconn.PgError) bool {
	return e.Code == "08P01" && strings.Contains(e.Message, "idle transaction timeout")
}

// timeoutWords names the setting whose timeout ended a holding. A transaction holding
// clears the server's own for its length (see txBeginSQL), so they can end one only if
// something set them again within it.
func timeoutWords(e *pgconn.PgError) string {
	switch e.Code {
	case "25P03":
		return "the server's idle_in_transaction_session_timeout ended the session"
	case "25P04":
		return "the server's transaction_timeout ended the session"
	}
	return "the pooler ended the connection, idle in its transaction for longer than its idle_transaction_timeout " +
		"(WithHeartbeat keeps a held lock from looking idle; fenced work (BeginFunc, DoTx) has the transaction " +
		"meanwhile: keep its pauses between statements under that timeout)"
}

// lostError is a loss with its cause classified (see lossCause): it wraps ErrLockLost and
// the cause, and carries the code for Hooks.
type lostError struct {
	code, words, where string
	cause              error
}

func (e *lostError) Error() string {
	return ErrLockLost.Error() + ": " + e.words + e.where + ": " + e.cause.Error()
}

func (e *lostError) Unwrap() []error { return []error{ErrLockLost, e.cause} }

// lossError is the end error of a session lost to cause; where says, if anything, when
// the loss was seen (" during a transaction").
func (p *pin) lossError(cause error, where string) error {
	code, words := lossCause(cause)
	return &opError{p.op(), p.describe(), &lostError{code, words, where, cause}}
}

// closedLoss is the end error of a held session that the Manager's (or the Session's)
// Close ended.
func (p *pin) closedLoss() error {
	return &opError{p.op(), p.describe(), fmt.Errorf("%w: %w", ErrLockLost, ErrClosed)}
}

// startBeat starts the heartbeat's timer (armBeat) if the Manager has a
// heartbeat. The caller holds p.mu. The option is looked at here, so that a Lock without
// a heartbeat never runs pin_heartbeat.go (TestPlainRoute).
func (p *pin) startBeat() {
	if p.m.set.heartbeat > 0 {
		p.armBeat()
	}
}
