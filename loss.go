package advisory

import (
	"context"
	"errors"
	"fmt"
	"os"
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
func (s *pin) hold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.heldSince = time.Now()
	s.watchIdle()
	return true
}

// watchIdle makes the session held and starts its watcher. The caller holds s.mu.
//
// The poller's registration is one-shot: the first event hands the session to its
// reader. Descriptor numbers are reused as soon as a socket is closed, so the poller must
// only ever be given s.fd while that number is certainly s's socket. The rule that
// ensures it: a session is registered only while it is in watchPolled mode, and in that
// mode nobody reads from or closes its connection (the poller does no I/O on it). Both
// ways out of watchPolled, SocketEvent and stopWatch, remove the registration under s.mu
// before anyone else may touch the connection. The reader goroutine, which may see the
// connection fail and close it, starts only after that.
func (s *pin) watchIdle() {
	s.state = stateHeld
	if s.m.poller != nil {
		if reg, err := s.m.poller.Add(s.fd, s); err == nil {
			s.polled, s.watch = reg, watchPolled
			return
		}
	}
	s.startReader()
}

// startReader hands the connection to a new reader goroutine, with a fresh channel for
// its exit: a Session's connection may go to a reader and back once per call. The caller
// holds s.mu.
func (s *pin) startReader() {
	s.watch = watchReading
	s.stopping.Store(false)
	s.watchDone = make(chan struct{})
	go s.readUntilLoss(s.watchDone)
}

// SocketEvent is called by the poller (it implements sockwatch.Handler) when the held
// session's socket became readable or hung up. The reader goroutine takes over and reads
// what came.
func (s *pin) SocketEvent() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch == watchHangup {
		s.hungUp()
		return
	}
	if s.watch != watchPolled {
		return // stopWatch took the connection back first
	}
	s.m.poller.Remove(&s.polled) // before the reader may close the socket: see watchIdle
	s.startReader()
}

// readUntilLoss blocks reading the idle connection, so a FIN, an RST, a FATAL message from
// pg_terminate_backend or a shutdown, or a keepalive abort is seen the moment the kernel
// sees it. Nothing is sent: no ping loop. A notification or notice makes the read return
// nil; it simply reads again.
func (s *pin) readUntilLoss(exited chan<- struct{}) {
	defer close(exited)
	for {
		err := s.pg.WaitForNotification(context.Background())
		if err == nil {
			continue
		}
		if s.stopping.Load() && errors.Is(err, os.ErrDeadlineExceeded) {
			return
		}
		s.lose(err)
		return
	}
}

// stopWatch takes the connection back from the watcher. It reports false if the watcher
// had already found the session lost.
func (s *pin) stopWatch() bool {
	s.mu.Lock()
	mode, exited := s.watch, s.watchDone
	s.watch = watchNone
	if mode == watchPolled {
		s.m.poller.Remove(&s.polled) // the socket is open: nobody else touches it in this mode
	}
	s.mu.Unlock()
	if mode != watchReading {
		return true
	}
	s.stopping.Store(true)
	s.pg.Conn().SetReadDeadline(aLongTimeAgo)
	<-exited
	s.mu.Lock()
	lost := s.state == stateEnded
	s.mu.Unlock()
	if lost {
		return false
	}
	s.pg.Conn().SetReadDeadline(time.Time{})
	return true
}

// lossCause says why a held connection failed: a short code, the Reason of a Hooks
// event (see endReason), and the same in words, for messages (see lossReason).
func lossCause(err error) (code, words string) {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "57P01":
		return "terminated", "the server terminated the session (pg_terminate_backend or shutdown)"
	case errors.As(err, &pgErr):
		return "server_closed", "the server ended the session"
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

// lossReason says in words why a held connection failed.
func lossReason(err error) string {
	_, words := lossCause(err)
	return words
}

// lossError is the end error of a session lost to cause; where says, if anything, when
// the loss was seen (" during a transaction").
func (s *pin) lossError(cause error, where string) error {
	return &opError{s.op(), s.describe(), fmt.Errorf("%w: %s%s: %w", ErrLockLost, lossReason(cause), where, cause)}
}

// closedLoss is the end error of a held session that the Manager's (or the Session's)
// Close ended.
func (s *pin) closedLoss() error {
	return &opError{s.op(), s.describe(), fmt.Errorf("%w: %w", ErrLockLost, ErrClosed)}
}
