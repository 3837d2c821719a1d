package advisory

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// session is one connection taken from the Manager's pool and pinned while it may hold a
// lock. Exactly one goroutine owns the connection at a time: the caller while a statement
// runs, the watcher while the lock is held idle. A connection that may hold a lock is
// never released to the pool; it is closed instead, and the server frees the lock.
type session struct {
	m      *Manager
	pc     *pgxpool.Conn
	pg     *pgconn.PgConn
	cancel *cancelHandler
	pid    uint32
	key    Key
	name   string // the lock's name, for messages; "" for a raw key
	fd     int    // the socket's descriptor, for the poller
	pollID int32  // the poller's ID for this session; 0 if never registered

	done      chan struct{} // closed when the session has ended
	watchDone chan struct{} // closed when the watcher goroutine has exited
	stopping  atomic.Bool   // set before the watcher is told to stop

	mu      sync.Mutex
	state   sessionState
	watch   watchMode
	closing bool  // Close has begun: the session must not become held
	err     error // why the session ended: wraps ErrLockLost on loss, else ErrNotHeld
}

type sessionState int

const (
	stateAcquiring sessionState = iota // the lock statement may be running; Close may interrupt it
	stateSettling                      // the statement returned; its caller decides
	stateHeld                          // the watcher owns the connection
	stateReleasing                     // an Unlock (or Close) owns the connection
	stateEnded                         // the connection is back in the pool or closed
)

// watchMode says who watches a held session's idle connection.
type watchMode int

const (
	watchNone    watchMode = iota
	watchPolled            // the Manager's poller (epoll); no goroutine of its own
	watchReading           // the session's readUntilLoss goroutine
)

// aLongTimeAgo is a read deadline in the past: it wakes a blocked read at once.
var aLongTimeAgo = time.Unix(1, 0)

func newSession(m *Manager, pc *pgxpool.Conn, key Key, name string) *session {
	pg := pc.Conn().PgConn()
	return &session{m: m, pc: pc, pg: pg, cancel: handlerOf(pg), pid: pg.PID(), key: key, name: name,
		fd: socketFD(pg.Conn()), done: make(chan struct{}), watchDone: make(chan struct{})}
}

// lock runs pg_advisory_lock and makes the outcome exact: on return with nil the session
// holds the lock, ctx was not done, and the watcher runs; on any error it does not hold
// the lock, as verified with the server or by closing the connection.
func (s *session) lock(ctx context.Context) error {
	key := s.key
	_, err := s.pc.Exec(waitCtx(ctx), "SELECT pg_advisory_lock($1)", int64(key))
	s.setState(stateSettling)
	interrupted := s.cancel.settle()
	if err == nil && ctx.Err() == nil && s.hold() {
		return nil
	}
	// The caller will not own this lock. The grant may have won the race against the
	// cancel (pg_advisory_lock then fails with 57014 although the session holds the lock,
	// or succeeds after ctx ended), so ask the server and release what it says we hold.
	if usable(s.pg, err) {
		if rerr := s.reconcile(key, interrupted); rerr != nil {
			s.discard()
		}
	} else {
		s.discard()
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case s.isClosing():
		return ErrClosed
	}
	return err
}

// tryLock runs pg_try_advisory_lock. On (true, nil) the session holds the lock and the
// watcher runs. On error the connection is closed (the server frees anything it may
// hold). On (false, nil) the session is still usable and holds nothing.
func (s *session) tryLock(ctx context.Context) (bool, error) {
	var ok bool
	err := s.pc.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(s.key)).Scan(&ok)
	s.setState(stateSettling)
	if err != nil {
		s.discard()
		return false, err
	}
	if ok && !s.hold() {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := s.unlock(ctx); err != nil {
			s.discard()
		}
		return false, ErrClosed
	}
	return ok, nil
}

// reconcileSQL unlocks the key if, and only if, this backend holds it: unlike a bare
// pg_advisory_unlock it leaves no WARNING in the server log when it does not.
const reconcileSQL = `SELECT pg_advisory_unlock($1) FROM pg_locks
WHERE locktype = 'advisory' AND pid = pg_backend_pid() AND granted
  AND classid = $2 AND objid = $3 AND objsubid = 1`

// reconcile releases the key if the server says this session holds it. A CancelRequest
// sent for the lock statement may land on this statement instead (57014): then it is run
// again; the cancel cannot strike twice.
func (s *session) reconcile(key Key, cancelSent bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		rows, err := s.pc.Query(ctx, reconcileSQL, int64(key), uint32(uint64(key)>>32), uint32(key))
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		if err == nil || !cancelSent || attempt == 2 || !isQueryCanceled(err) {
			return err
		}
	}
}

// errNotHeldByServer is unlock's error when pg_advisory_unlock returned false.
var errNotHeldByServer = errors.New("the server reports the lock was not held by this session")

// unlock runs pg_advisory_unlock on a session whose watcher has been stopped. It returns
// nil only if the server confirmed the release.
func (s *session) unlock(ctx context.Context) error {
	var ok bool
	err := s.pc.QueryRow(ctx, "SELECT pg_advisory_unlock($1)", int64(s.key)).Scan(&ok)
	if err == nil && !ok {
		return errNotHeldByServer
	}
	return err
}

// unlockFailure says what a failed unlock means. If the connection failed by itself (the
// session was terminated, the server went away, the network failed) rather than because
// ctx ended, the lock may have been lost before the unlock reached the server: that is a
// loss, and the caller must hear ErrLockLost.
func (s *session) unlockFailure(ctx context.Context, err error) (endErr error, lost bool) {
	if errors.Is(err, errNotHeldByServer) || (ctx.Err() == nil && !usable(s.pg, err)) {
		return &opError{"lock", describe(s.key, s.name), fmt.Errorf("%w: %s: %w", ErrLockLost, lossReason(err), err)}, true
	}
	return err, false
}

func (s *session) setState(st sessionState) {
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
}

// hold hands the connection to the watcher: the Manager's poller where there is one,
// else a reader goroutine. It refuses once Close has begun.
func (s *session) hold() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closing {
		return false
	}
	s.state = stateHeld
	if s.m.poller != nil && s.m.poller.add(s) == nil {
		s.watch = watchPolled
		return true
	}
	s.watch = watchReading
	go s.readUntilLoss()
	return true
}

// socketEvent is called by the poller when the held session's socket became readable or
// hung up. The reader goroutine takes over and reads what came.
func (s *session) socketEvent() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.watch != watchPolled {
		return // stopWatch took the connection back first
	}
	s.watch = watchReading
	go s.readUntilLoss()
}

func (s *session) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// release ends a held session: it stops the watcher, unlocks, and returns the connection
// to the pool, or closes it if the release cannot be confirmed. endErr is what Err
// reports afterwards. It returns nil on a confirmed release; the session's end error if
// it had already ended (ErrNotHeld, or a loss); ErrNotHeld if another release is under
// way; else the failed statement's error (the connection is then closed).
func (s *session) release(ctx context.Context, endErr error) error {
	s.mu.Lock()
	switch s.state {
	case stateEnded:
		err := s.err
		s.mu.Unlock()
		return err
	case stateReleasing:
		s.mu.Unlock()
		return ErrNotHeld
	}
	s.state = stateReleasing
	s.mu.Unlock()
	if !s.stopWatch() {
		return s.endErr()
	}
	if err := s.unlock(ctx); err != nil {
		failure, lost := s.unlockFailure(ctx, err)
		if lost {
			endErr = failure
		}
		s.end(false, endErr)
		return failure
	}
	s.end(true, endErr)
	return nil
}

func (s *session) endErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// shutdown is Close's part for one session: interrupt a wait, or release a held lock.
func (s *session) shutdown() {
	s.mu.Lock()
	s.closing = true
	st := s.state
	if st == stateAcquiring {
		s.cancel.interrupt()
	}
	s.mu.Unlock()
	if st == stateHeld {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		s.release(ctx, &opError{"lock", describe(s.key, s.name), fmt.Errorf("%w: %w", ErrLockLost, ErrClosed)})
	}
}

// readUntilLoss blocks reading the idle connection, so a FIN, an RST, a FATAL message from
// pg_terminate_backend or a shutdown, or a keepalive abort is seen the moment the kernel
// sees it. Nothing is sent: no ping loop. A notification or notice makes the read return
// nil; it simply reads again.
func (s *session) readUntilLoss() {
	defer close(s.watchDone)
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
func (s *session) stopWatch() bool {
	s.mu.Lock()
	mode := s.watch
	s.watch = watchNone
	if s.pollID != 0 {
		s.m.poller.remove(s) // also clears a one-shot registration that already fired
	}
	s.mu.Unlock()
	if mode != watchReading {
		return true
	}
	s.stopping.Store(true)
	s.pg.Conn().SetReadDeadline(aLongTimeAgo)
	<-s.watchDone
	s.mu.Lock()
	lost := s.state == stateEnded
	s.mu.Unlock()
	if lost {
		return false
	}
	s.pg.Conn().SetReadDeadline(time.Time{})
	return true
}

// lose ends a held session whose connection failed.
func (s *session) lose(cause error) {
	s.end(false, &opError{"lock", describe(s.key, s.name), fmt.Errorf("%w: %s: %w", ErrLockLost, lossReason(cause), cause)})
}

// end closes the session: the connection goes back to the pool if keep, else it is
// closed. err is what Err reports from now on.
func (s *session) end(keep bool, err error) {
	s.mu.Lock()
	if s.state == stateEnded {
		s.mu.Unlock()
		return
	}
	s.state, s.err = stateEnded, err
	s.mu.Unlock()
	if !keep {
		s.discard()
	}
	s.pc.Release() // pgxpool destroys a closed connection instead of keeping it
	s.m.forget(s)
	close(s.done) // last: when Done closes, everything the session had is given back
}

// discard closes the connection without returning it to the pool's idle set.
func (s *session) discard() {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	s.pg.Close(ctx)
}

// usable reports whether the connection is still in step with the server after err: the
// server answered with an ordinary (non-FATAL) error, or there was no error.
func usable(pg *pgconn.PgConn, err error) bool {
	if pg.IsClosed() {
		return false
	}
	if err == nil {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Severity != "FATAL" && pgErr.Severity != "PANIC"
}

func isQueryCanceled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}

// lossReason says in words why a held connection failed.
func lossReason(err error) string {
	var pgErr *pgconn.PgError
	switch {
	case errors.As(err, &pgErr) && pgErr.Code == "57P01":
		return "the server terminated the session (pg_terminate_backend or shutdown)"
	case errors.As(err, &pgErr):
		return "the server ended the session"
	case errors.Is(err, syscall.ETIMEDOUT):
		return "the network went silent past the keepalive limit (partition or host down)"
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return "the connection was reset"
	case errors.Is(err, errNotHeldByServer):
		return "the session no longer held it"
	}
	return "the connection failed"
}
