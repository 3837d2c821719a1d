package advisory

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
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
	lease  lease // what the locks stand on: the session, or a transaction (see holding.go)
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
	// holderG is the goroutine the latest holding was given to, with a logger: a Lock
	// that waits for it in the same goroutine waits for itself (see logWait).
	holderG atomic.Uint64

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
	// keyBuf is $1 encoded for ownRow, and params the parameter list pointing at it.
	keyBuf [8]byte
	params [1][]byte
	// polled is the poller's registration of fd, or of txFD in a transaction; zero while
	// not registered (see watchIdle, watchForHangup).
	polled sockwatch.Registration

	// place is the WithWaitSessions place this session stands on (see shared_wait.go),
	// given back once its connection is (endAs); it moves with a handoff. Under mu.
	place chan struct{}

	done      chan struct{} // closed when the session has ended
	watchDone chan struct{} // closed when the current reader goroutine has exited; nil before the first (see startReader)
	stopping  atomic.Bool   // set before the reader is told to stop

	heldSince time.Time // when this holding began, for the logs and hooks
	// grantedAt is when the server granted the lock to the session: the start of a run of
	// in-process handoffs (see lock_handoff.go), which every holding of the run records in
	// its statements' comments (see named), as Holders reads it.
	grantedAt time.Time
	gated     bool        // counted in the Manager's gate for the key
	tried     bool        // found taken on a shared session just now: no try by key first (see waitRow)
	handoff   bool        // may hand the lock to a queued Lock of this Manager (see lock_handoff.go)
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

	// While a caller's transaction runs on the connection (stateInTx; see pin_tx.go):
	txDone    chan struct{} // closed when it ends
	txFD      int           // the session's own duplicate of the socket's descriptor, or -1; closed by end
	announced bool          // done is closed already: a loss was seen during the transaction

	fenceToken atomic.Int64 // the holding's fencing token once taken (Lock.Token); 0 before

	nested nestedLocks // its open re-entered Locks (see lock_reentry.go); under mu
	inFn   atomic.Bool // a caller's BeginFunc runs fn on the connection (see reentry.own)

	// A transaction holding's (see lease_tx.go), owned like the connection: its
	// transaction's virtual id, once read (see txLease.identity), and dirty: a caller's
	// writes (BeginFunc) wait in the transaction for the holding's COMMIT.
	vxid  string
	dirty bool

	beat *time.Timer   // the heartbeat's timer (see pin_heartbeat.go); nil while off. Under mu
	turn chan struct{} // a Session's turn, which its heartbeat takes too; nil for a Lock

	tag   lazyTag // the holding's work tag (see workTag), made on first use
	dbOID uint32  // the database's oid, read at set-up (see look): work tags and checks
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

// newPin pins pc for the lock t: its statements, its ownership token and its socket.
func newPin(m *Manager, pc *pgxpool.Conn, t target) *pin {
	pg := pc.Conn().PgConn()
	pid, token := ownership(pg)
	s := &pin{m: m, lease: m.lease, pc: pc, pg: pg, cancel: handlerOf(pg), pid: pid, token: token,
		key: t.key, name: t.name, shared: t.shared, pair: t.pair, gated: t.gated, tried: t.tried,
		handoff: m.set.handoffMax > 0 && t.eligible(),
		st:      m.lease.statements(m, t, isDirect(pg)),
		fd:      connFD(pg), txFD: -1, done: make(chan struct{})}
	s.hidden.Store(t.hidden)
	s.handle = Lock{s: s, on: s, name: t.name}
	s.dbOID, _ = pg.CustomData()[dbOIDKey].(uint32) // read here, once: statements write CustomData
	tok := pg.CustomData()[tokenKey]                // already boxed: the token as any, without a copy
	if _, ok := tok.(string); !ok {
		tok = token
	}
	s.args = [2]any{int64(t.key), tok}
	s.dst = [2]any{&s.rowPID, &s.rowOK}
	s.params[0] = s.keyBuf[:]
	return s
}

// row runs one of the key's statements (lock, tryLock, unlock: $1 the key, $2 the
// token) and returns its row: the backend pid, and the result, nil when the statement
// ran on a backend that is not the connection's own (see ownedBy). On a direct
// connection the statement takes only the key, or nothing if keyInText (see
// statementsFor), and returns only the result: the pid is the connection's own. The
// result points into the pin: read it before the next statement.
func (p *pin) row(ctx context.Context, sql string, keyInText bool) (uint32, *bool, error) {
	return p.rowAs(ctx, sql, keyInText, p.unprepared(sql))
}

// rowAs is row with the choice of sending sql unprepared already made (and counted: see
// unprepared).
func (p *pin) rowAs(ctx context.Context, sql string, keyInText, unprepared bool) (uint32, *bool, error) {
	p.rowPID, p.rowOK = 0, pgtype.Bool{}
	var err error
	switch {
	case p.st.direct && keyInText && unprepared:
		p.rowPID = p.pid
		err = p.simpleRow(ctx, sql)
	case p.st.direct && keyInText:
		p.rowPID = p.pid
		err = p.pc.QueryRow(ctx, sql).Scan(p.dst[1:]...)
	case p.st.direct && p.m.ownPrepared && ownNames[sql] != "":
		p.rowPID = p.pid
		err = p.ownRow(ctx, sql)
	case p.st.direct:
		p.rowPID = p.pid
		err = p.pc.QueryRow(ctx, sql, p.args[:1]...).Scan(p.dst[1:]...)
	case unprepared:
		err = p.pc.QueryRow(ctx, sql, pgx.QueryExecModeExec, p.args[0], p.args[1]).Scan(p.dst[:]...)
	default:
		err = p.pc.QueryRow(ctx, sql, p.args[:]...).Scan(p.dst[:]...)
	}
	if !p.rowOK.Valid {
		return p.rowPID, nil, err
	}
	return p.rowPID, &p.rowOK.Bool, err
}

// errNotHeldByServer is unlock's error when pg_advisory_unlock returned false.
var errNotHeldByServer = errors.New("the server reports the lock was not held by this session")

// unlock releases what the pin holds on the server (pg_advisory_unlock, or the holding
// transaction's COMMIT: see lease), its watcher stopped. It returns nil only if the
// server confirmed the release.
func (p *pin) unlock(ctx context.Context, keep bool) error { return p.lease.unlock(p, ctx, keep) }

func (p *pin) unlockRow(ctx context.Context) (uint32, *bool, error) {
	if !p.multi {
		return p.row(ctx, p.st.unlock, false)
	}
	var ok *bool
	var pid uint32
	err := p.pc.QueryRow(ctx, unlockAllSQL, p.token).Scan(&pid, &ok)
	return pid, ok, err
}

func (p *pin) setState(st sessionState) {
	p.mu.Lock()
	p.state = st
	p.mu.Unlock()
}

// Keys of a connection's PgConn.CustomData set by its setup (see manager_setup.go): the backend
// pid as pg_backend_pid() reported it (a proxy answers the startup with a BackendKeyData
// of its own, so PgConn.PID is not to be trusted for this), the ownership token, and the
// socket's descriptor (see connFD), the database's oid (see workTag), and, only on a connection that goes straight to its
// backend (see look.directPath), directKey.
const (
	backendPIDKey = "advisory.backendPID"
	tokenKey      = "advisory.token"
	fdKey         = "advisory.fd"
	directKey     = "advisory.direct"
	dbOIDKey      = "advisory.dbOID"
)

// isDirect reports whether the connection was found at setup to go straight to its
// backend, with no proxy or address translation between.
func isDirect(pg *pgconn.PgConn) bool {
	d, _ := pg.CustomData()[directKey].(bool)
	return d
}

// connFD returns the descriptor of the connection's socket (-1 if it has none), found
// once at setup: a connection keeps its socket for life, and asking the runtime for it
// on every Lock cost two allocations.
func connFD(pg *pgconn.PgConn) int {
	if fd, ok := pg.CustomData()[fdKey].(int); ok {
		return fd
	}
	return sockfd.FD(pg.Conn())
}

func ownership(pg *pgconn.PgConn) (pid uint32, token string) {
	pid, ok := pg.CustomData()[backendPIDKey].(uint32)
	if !ok {
		pid = pg.PID()
	}
	token, _ = pg.CustomData()[tokenKey].(string)
	return pid, token
}

// isPoolerSymptom reports the errors pgx's prepared statements meet behind a
// transaction-pooling proxy: a statement prepared on this very connection vanished
// (26000), or one of the same name already exists (42P05) because another client
// prepared it on the same backend.
func isPoolerSymptom(err error) bool {
	code := sqlState(err)
	return code == "26000" || code == "42P05"
}

// checkBackend fails the session loudly, and closes its connection, if a lock statement
// ran on a backend other than the connection's own (owned is nil: the statement did
// nothing there, see ownedBy) or hit a prepared-statement symptom. It never unlocks
// anything on a backend that is not the connection's own: that lock would be someone
// else's. Other errors are left to the caller.
func (p *pin) checkBackend(pid uint32, owned *bool, err error) error {
	switch {
	case err == nil:
		if perr := p.checkOwned(pid, owned); perr != nil {
			p.discard()
			return perr
		}
	case isPoolerSymptom(err):
		p.discard()
		return fmt.Errorf("%w: a statement prepared on this connection met another client's on the server"+sessionHint+": %w", ErrPooler, err)
	}
	return nil
}

// sessionHint ends the errors of session holdings that met a transaction pooler the
// probe did not catch (busy clients can hide one): what the user can do.
const sessionHint = "; a session-level lock cannot be held through a transaction pooler (PgBouncer " +
	"pool_mode=transaction?): hold by transaction " +
	"(WithHolding(HoldingTransaction)), or connect directly or through session pooling"

// checkOwned returns nil if a statement that returned (pid, owned) ran on the
// connection's own backend, and ErrStandby if it ran on a standby.
func (p *pin) checkOwned(pid uint32, owned *bool) error {
	switch {
	case pid == 0: // a lock statement on a standby (see statements_primary.go)
		return standbyError()
	case owned == nil && pid == p.pid:
		return fmt.Errorf("%w: the connection's backend (pid %d) no longer carries its ownership token: "+
			"another client's statements ran there"+sessionHint, ErrPooler, pid)
	case owned == nil || pid != p.pid:
		return fmt.Errorf("%w: the connection's backend is pid %d but the statement ran on pid %d, "+
			"which belongs to another client; it did nothing there"+sessionHint, ErrPooler, p.pid, pid)
	}
	return nil
}

// foreignError is the error of a clean-up statement that ran on another client's backend.
func (p *pin) foreignError() error {
	return fmt.Errorf("%w: a statement of the connection (backend pid %d) ran on another client's backend; "+
		"it did nothing there", ErrPooler, p.pid)
}
