package advisory

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory/internal/cancelreq"
	"github.com/pgadvisory/advisory/internal/sockfd"
	"github.com/pgadvisory/advisory/internal/sockwatch"
)

// A pin is one connection taken from the Manager's pool and pinned while it may hold a
// lock: a single Lock's, or a Session's. (The name is not "session" so that it cannot be
// mistaken for the exported Session, which is built on one.) Exactly one goroutine owns
// the connection at a time: the caller while a statement runs, the watcher while the lock
// is held idle. A connection that may hold a lock is never released to the pool; it is
// closed instead, and the server frees the lock.
type pin struct {
	m      *Manager
	pc     *pgxpool.Conn
	pg     *pgconn.PgConn
	cancel *cancelreq.Handler
	pid    uint32
	token  string // the connection's ownership token: see ownedBy
	key    Key
	name   string // the lock's name, for messages; "" for a raw key
	shared bool
	pair   bool
	st     statements
	fd     int  // the socket's descriptor, for the poller
	handle Lock // what Manager.Lock returns: one allocation with the pin

	// args are the lock statements' arguments ($1 the key, $2 the token), boxed once per
	// pin; their (pid, result) rows are scanned into rowPID and rowOK through dst. Only
	// the goroutine that owns the connection (see above) runs them, so a lock cycle
	// allocates nothing for its arguments and results. A Session's connection locks many
	// keys: its $1 is a pointer to argKey, which each call sets (see Manager.Session).
	argKey int64
	args   [2]any
	dst    [2]any
	rowPID uint32
	rowOK  pgtype.Bool
	// polled is the poller's registration of fd, or of txFD in a transaction; zero while
	// not registered (see watchIdle, watchForHangup).
	polled sockwatch.Registration

	done      chan struct{} // closed when the session has ended
	watchDone chan struct{} // closed when the current reader goroutine has exited; nil before the first (see startReader)
	stopping  atomic.Bool   // set before the reader is told to stop

	heldSince time.Time   // when the lock was granted, for the logs
	gated     bool        // counted in the Manager's gate for the key
	multi     bool        // a multi-lock Session's connection: key and st are unused
	hidden    atomic.Bool // no Ended hook: a Semaphore's turnstile, or a slot it let go unused
	retire    atomic.Bool // close the connection at release instead of keeping it
	// settled, once set, is what release waits for first (see settleFirst).
	settled atomic.Pointer[<-chan struct{}]

	mu      sync.Mutex
	state   sessionState
	watch   watchMode
	closing bool  // Close has begun: the session must not become held
	err     error // why the session ended: wraps ErrLockLost on loss, else ErrNotHeld

	// While a caller's transaction runs on the connection (stateInTx; see tx.go):
	txDone    chan struct{} // closed when it ends
	txFD      int           // the session's own duplicate of the socket's descriptor, or -1; closed by end
	announced bool          // done is closed already: a loss was seen during the transaction

	fenceToken atomic.Int64 // the holding's fencing token once taken (Lock.Token); 0 before

	workOnce sync.Once
	tag      string // the holding's work tag (see workTag), made on first use
}

type sessionState int

const (
	stateAcquiring sessionState = iota // the lock statement may be running; Close may interrupt it
	stateSettling                      // the statement returned; its caller decides
	stateHeld                          // the watcher owns the connection
	stateReleasing                     // an Unlock (or Close) owns the connection
	stateInTx                          // a caller's transaction owns it; the watcher sees hang-ups
	stateEnded                         // the connection is back in the pool or closed
)

func newPin(m *Manager, pc *pgxpool.Conn, t target) *pin {
	pg := pc.Conn().PgConn()
	pid, token := ownership(pg)
	s := &pin{m: m, pc: pc, pg: pg, cancel: handlerOf(pg), pid: pid, token: token,
		key: t.key, name: t.name, shared: t.shared, pair: t.pair, gated: t.gated,
		st: m.texts.statements(t.name, t.shared, t.pair, isDirect(pg)),
		fd: connFD(pg), txFD: -1, done: make(chan struct{})}
	s.hidden.Store(t.hidden)
	s.handle = Lock{s: s, name: t.name}
	tok := pg.CustomData()[tokenKey] // already boxed: the token as any, without a copy
	if _, ok := tok.(string); !ok {
		tok = token
	}
	s.args = [2]any{int64(t.key), tok}
	s.dst = [2]any{&s.rowPID, &s.rowOK}
	return s
}

// row runs one of the key's statements (lock, tryLock, unlock: $1 the key, $2 the
// token) and returns its row: the backend pid, and the result, nil when the statement
// ran on a backend that is not the connection's own (see ownedBy). On a direct
// connection the statement takes only the key, or nothing if keyInText (see
// statementsFor), and returns only the result: the pid is the connection's own. The
// result points into the pin: read it before the next statement.
func (s *pin) row(ctx context.Context, sql string, keyInText bool) (uint32, *bool, error) {
	s.rowPID, s.rowOK = 0, pgtype.Bool{}
	var err error
	switch {
	case s.st.direct && keyInText:
		s.rowPID = s.pid
		err = s.pc.QueryRow(ctx, sql).Scan(s.dst[1:]...)
	case s.st.direct:
		s.rowPID = s.pid
		err = s.pc.QueryRow(ctx, sql, s.args[:1]...).Scan(s.dst[1:]...)
	default:
		err = s.pc.QueryRow(ctx, sql, s.args[:]...).Scan(s.dst[:]...)
	}
	if !s.rowOK.Valid {
		return s.rowPID, nil, err
	}
	return s.rowPID, &s.rowOK.Bool, err
}

// errNotHeldByServer is unlock's error when pg_advisory_unlock returned false.
var errNotHeldByServer = errors.New("the server reports the lock was not held by this session")

// unlock runs pg_advisory_unlock on a session whose watcher has been stopped. It returns
// nil only if the server confirmed the release.
func (s *pin) unlock(ctx context.Context) error {
	pid, ok, err := s.unlockRow(ctx)
	if err == nil {
		err = s.checkOwned(pid, ok)
	}
	if err == nil && !*ok {
		return errNotHeldByServer
	}
	return err
}

func (s *pin) unlockRow(ctx context.Context) (uint32, *bool, error) {
	if !s.multi {
		return s.row(ctx, s.st.unlock, false)
	}
	var ok *bool
	var pid uint32
	err := s.pc.QueryRow(ctx, unlockAllSQL, s.token).Scan(&pid, &ok)
	return pid, ok, err
}

// unlockFailure says what a failed unlock means. If the connection failed by itself (the
// session was terminated, the server went away, the network failed) rather than because
// ctx ended, the lock may have been lost before the unlock reached the server: that is a
// loss, and the caller must hear ErrLockLost. A FATAL from the server is such a failure
// even when ctx has ended too (the two raced): the server ended the session, ctx did not.
func (s *pin) unlockFailure(ctx context.Context, err error) (endErr error, lost bool) {
	if errors.Is(err, errNotHeldByServer) || serverEnded(err) || (ctx.Err() == nil && !usable(s.pg, err)) {
		return s.lossError(err, ""), true
	}
	return err, false
}

// op and describe name the session in messages: the lock it holds, or, for a Session's
// connection, the connection.
func (s *pin) op() string {
	if s.multi {
		return "session"
	}
	return "lock"
}

func (s *pin) describe() string {
	if s.multi {
		return "(backend pid " + strconv.FormatUint(uint64(s.pid), 10) + ")"
	}
	return describe(s.key, s.name, s.pair)
}

func (s *pin) setState(st sessionState) {
	s.mu.Lock()
	s.state = st
	s.mu.Unlock()
}

func (s *pin) isClosing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing
}

// release ends a held session: it stops the watcher, unlocks, and returns the connection
// to the pool, or closes it if the release cannot be confirmed. endErr is what Err
// reports afterwards. It returns nil on a confirmed release; the session's end error if
// it had already ended (ErrNotHeld, or a loss); ErrNotHeld if another release is under
// way, or the loss Close reports if that release is Close's; else the failed statement's
// error (the connection is then closed).
func (s *pin) release(ctx context.Context, endErr error) error {
	s.awaitSettled(ctx)
	if err := s.awaitTx(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	switch s.state {
	case stateEnded:
		err := s.err
		s.mu.Unlock()
		return err
	case stateReleasing:
		closing := s.closing
		s.mu.Unlock()
		if closing { // the release under way is Close's: the lock ends as Close ends it
			return s.closedLoss()
		}
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
	s.end(!s.retire.Load(), endErr)
	return nil
}

// serverEnded reports whether err is the server ending the session (a FATAL or PANIC).
func serverEnded(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Severity == "FATAL" || pgErr.Severity == "PANIC")
}

func (s *pin) endErr() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// shutdown is Close's part for one session: interrupt a wait, or release a held lock.
func (s *pin) shutdown() {
	s.mu.Lock()
	s.closing = true
	st := s.state
	switch {
	case st == stateAcquiring:
		s.cancel.Interrupt()
	case st == stateInTx && s.txFD >= 0:
		sockfd.Shutdown(s.txFD) // the transaction fails and is rolled back; see endTx
	}
	s.mu.Unlock()
	if st == stateHeld {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		s.release(ctx, s.closedLoss())
	}
}

// lose ends a held session whose connection failed.
func (s *pin) lose(cause error) {
	s.end(false, s.lossError(cause, ""))
}

// end closes the session: the connection goes back to the pool if keep, else it is
// closed. err is what Err reports from now on.
func (s *pin) end(keep bool, err error) {
	s.mu.Lock()
	if s.state == stateEnded {
		s.mu.Unlock()
		return
	}
	if s.announced {
		err = s.err // the loss seen during a transaction, which Done announced already
	}
	s.state, s.err = stateEnded, err
	announced := s.announced
	s.announced = true
	dup := s.txFD // unregistered: the last transaction's endTx removed it
	s.txFD = -1
	s.mu.Unlock()
	if !s.heldSince.IsZero() {
		s.logEnd(err, s.heldSince)
		if h := s.m.set.hooks.Ended; h != nil && !s.multi && !s.hidden.Load() {
			ev := s.event(0, time.Since(s.heldSince), endReason(err), lostErr(err))
			callUser(s.m.set.logger, "hook Ended", func() { h(ev) })
		}
	}
	if !keep {
		s.discard()
	}
	if dup >= 0 {
		sockfd.Close(dup)
	}
	s.pc.Release() // pgxpool destroys a closed connection instead of keeping it
	s.m.forget(s)
	if s.gated {
		s.m.gates.sessionEnded(gateKey{s.key, s.pair})
	}
	if !announced {
		close(s.done) // last: when Done closes, everything the session had is given back
	}
}

// lostErr is err if it is a loss, else nil: a release's ErrNotHeld is not news.
func lostErr(err error) error {
	if errors.Is(err, ErrLockLost) {
		return err
	}
	return nil
}

// discard closes the connection without returning it to the pool's idle set.
func (s *pin) discard() {
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	s.pg.Close(ctx)
}
