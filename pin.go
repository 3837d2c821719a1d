package advisory

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory/internal/cancelreq"
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

// unlockFailure says what a failed unlock means. If the connection failed by itself (the
// session was terminated, the server went away, the network failed) rather than because
// ctx ended, the lock may have been lost before the unlock reached the server: that is a
// loss, and the caller must hear ErrLockLost. A FATAL from the server is such a failure
// even when ctx has ended too (the two raced): the server ended the session, ctx did not.
func (p *pin) unlockFailure(ctx context.Context, err error) (endErr error, lost bool) {
	if errors.Is(err, errNotHeldByServer) || serverEnded(err) || (ctx.Err() == nil && !usable(p.pg, err)) {
		return p.lossError(err, ""), true
	}
	return err, false
}

// op and describe name the session in messages: the lock it holds, or, for a Session's
// connection, the connection.
func (p *pin) op() string {
	if p.multi {
		return "session"
	}
	return "lock"
}

func (p *pin) describe() string {
	if p.multi {
		return "(backend pid " + strconv.FormatUint(uint64(p.pid), 10) + ")"
	}
	return describe(p.key, p.name, p.pair)
}

func (p *pin) setState(st sessionState) {
	p.mu.Lock()
	p.state = st
	p.mu.Unlock()
}

// isHeld reports whether the pin holds its lock: held, or lent to a transaction.
func (p *pin) isHeld() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return (p.state == stateHeld || p.state == stateInTx) && !p.announced
}

func (p *pin) isClosing() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closing
}
