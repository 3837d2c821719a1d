package advisory

import (
	"cmp"
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory/internal/cancelreq"
	"github.com/pgadvisory/advisory/internal/sockwatch"
)

// A Manager takes advisory locks on one database. It owns a pgxpool.Pool set up for
// locking: every connection carries the keepalive settings, and by default each held
// lock, and each Lock waiting on the server, pins one connection, so the pool size
// (pool_max_conns in the connection string) bounds how many locks the Manager can hold
// and wait for at once. Under [WithSharedSessions] holdings share connections, and the
// pool bounds the waits and the shared sessions instead (docs/scale.md).
//
// Its methods come in families:
//
//   - Lock, TryLock and their Shared, Key and Pair forms return a held [Lock]: Lock
//     waits until held or ctx ends (on the server; in the process while a holder may
//     hand off, [WithLocalHandoff], or parked, [WithWaitSessions]), TryLock fails at once
//     with [ErrLocked].
//   - Do, DoTx, TryDo, Lead and LeadAs run a function under a lock and release it after;
//     they drain an earlier holder's work first (not under [WithoutDrain])
//     and cancel the function's ctx on a loss.
//   - Leader and Observe (and their Key forms) tell followers who leads and each change;
//     CreateLeaderTable stores the values leaders publish.
//   - Session and Semaphore return handles of their own ([Session], [Semaphore]).
//   - Holders, HoldersKey, HoldersPair and AllHolders read who holds and waits (pg_locks).
//   - CreateFenceTable and CheckToken are the database side of fencing tokens.
//   - Bounds, Stat and Close describe and end the Manager.
//
// Reentrancy is by ctx, the caller's identity in Go. A lock call (Lock, TryLock, every
// form of them, Do, DoTx, TryDo, Lead) whose ctx carries a live holding of the same lock
// from this Manager ([LockFromContext]: fn's ctx in Do, DoTx, TryDo and Lead; or
// [ContextWithLock]) in a mode that covers the call's (exclusive covers both) re-enters
// it: it returns at once, with no statement, a Lock of its own ([Lock.Reentered]) that
// ends with the holding, and whose Unlock releases nothing; a re-entering Do or TryDo
// drains nothing and TryDo holds nothing after fn. A holding that has ended fails the call
// at once with the holding's end. Where re-entry cannot be honoured, the call fails at
// once with [ErrNotReentrant]: a shared holding and an exclusive call, another Manager's
// holding of the lock in this Manager's database, a Semaphore's slot and an Acquire of
// the same Semaphore. Without a holding in its ctx, a call waits for a holding of this
// Manager as for any other.
//
// A Manager is safe for concurrent use by multiple goroutines.
type Manager struct {
	pool   *pgxpool.Pool
	set    settings
	lease  lease // what every lock of the Manager stands on (see holding.go)
	proxy  *proxyState
	poller *sockwatch.Watcher // watches held idle sessions; nil where epoll is not available
	slices sliceWatch         // bounds the slices of waits, one timer for all (pin_slices.go)
	// maxConns is the pool's size. (pgxpool's Config() returns a deep copy: far too
	// costly for every Lock call.)
	maxConns int
	// preparedBudget is how many named statements a connection may prepare: half its
	// statement cache when it prepares and caches statements (pgx's default mode), else -1;
	// prepareAt is the use on one connection at which a named statement is prepared. Uses
	// before it, and every use past the budget, are sent unprepared (see unprepared).
	preparedBudget, prepareAt int
	// ownPrepared: the direct key statements run through ownRow (see pin_prepared.go).
	ownPrepared bool
	// txBegin starts each holding transaction (see txBeginSQL); used where the Manager
	// holds by transaction.
	txBegin string

	gates   gates      // in-process queues of Lock calls, per key
	taken   contention // how often named locks' tries by key find them taken (pin_named.go)
	leaders leaderHub  // the LISTEN connection of leader observers
	texts   textCache  // statement texts of named locks
	hosts   hostSet    // shared sessions (WithSharedSessions; see shared.go)

	mu        sync.Mutex
	closed    bool
	closing   chan struct{} // closed when Close begins
	closeDone chan struct{}
	sessions  map[*pin]struct{} // sessions that have not ended
	pinned    int               // pool connections pinned or about to be: see reserve
	connWaits []*connWait       // calls waiting in reserve, in the order they began
	// connWaiting is len(connWaits), for a shared session that would rest (see rest),
	// which must not take mu under hostSet.mu.
	connWaiting atomic.Int32
	active      sync.WaitGroup // calls in progress and sessions not ended
}

// DefaultMaxConns is the pool size New uses when the connection string sets no
// pool_max_conns: each held lock, and each Lock waiting on the server, takes one
// connection, so pgxpool's own default (4 on small machines) would let a process hold only
// 4 locks. Connections are opened only as they are needed.
const DefaultMaxConns = 16

// New parses connString (a PostgreSQL URL or keyword/value string, with pgxpool's pool_*
// settings; pool_max_conns defaults to [DefaultMaxConns]) and returns a Manager. It
// connects to check that the server is reachable, accepts the session settings and
// enforces advisory locks (else [ErrUnsupportedServer]); ctx governs only that check. On
// error nothing is left open, and no error text contains the password (an unparsable
// string wraps [ErrInvalidOption]).
//
// Every lock connection gets keepalive on both ends, client_connection_check_interval, and
// no lock, statement or idle timeout, so that ctx is a Lock call's only timeout and a held
// lock lives exactly as long as its connection; behind a proxy none of these is set.
// Sessions are named "PROGRAM HOST/PID" unless the string or PGAPPNAME names them.
// docs/locking.md has the full contract.
func New(ctx context.Context, connString string, opts ...Option) (*Manager, error) {
	cfg, err := pgxpool.ParseConfig(connString)
	if err != nil {
		return nil, parseError(connString, err)
	}
	// pgxpool gives no sign whether pool_max_conns was set; pgx's own parser keeps it
	// among the settings it does not know.
	cc, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, parseError(connString, err)
	}
	if _, set := cc.RuntimeParams["pool_max_conns"]; !set {
		cfg.MaxConns = DefaultMaxConns
	}
	return NewWithConfig(ctx, cfg, opts...)
}

// NewWithConfig is like [New] but starts from the caller's pool configuration, which it
// copies and does not modify. libpq's keepalive keys (keepalives, keepalives_idle,
// keepalives_interval, keepalives_count, tcp_user_timeout), which pgx would send to the
// server, are taken out of its RuntimeParams and applied to the client end. The library installs its own dial wrapper (around the
// config's DialFunc), context watcher handler and AfterConnect (which runs the
// config's own AfterConnect after setting up the session). It panics if cfg is nil.
func NewWithConfig(ctx context.Context, cfg *pgxpool.Config, opts ...Option) (*Manager, error) {
	if cfg == nil {
		panic("advisory: NewWithConfig with a nil config")
	}
	set := defaultSettings()
	for _, opt := range opts {
		if opt.apply == nil {
			continue
		}
		if err := opt.apply(&set); err != nil {
			return nil, err
		}
	}
	cfg = cfg.Copy()
	if cfg.ConnConfig.RuntimeParams["application_name"] == "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = defaultApplicationName()
	}
	if err := takeLibpqKeepalive(cfg.ConnConfig.RuntimeParams, &set); err != nil {
		return nil, err
	}
	ps := &proxyState{logger: set.logger, holding: set.holding, blind: set.blindProbe}
	pool, kind, version, err := connect(ctx, cfg, &set, ps)
	if err != nil {
		awaitCancels(&ps.cancels, set.logger)
		return nil, err
	}
	p, err := sockwatch.New()
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("advisory: start socket poller: %w", err)
	}
	m := &Manager{pool: pool, set: set, lease: leaseFor(kind), txBegin: txBeginSQL(&set, version),
		proxy: ps, poller: p, maxConns: int(pool.Config().MaxConns),
		preparedBudget: preparedBudget(cfg.ConnConfig), prepareAt: cmp.Or(set.prepareNamedAt, prepareNamedAt),
		ownPrepared: useOwnPrepared(cfg.ConnConfig),
		closing:     make(chan struct{}), closeDone: make(chan struct{}), sessions: make(map[*pin]struct{})}
	m.hosts.linger = cmp.Or(set.hostLinger, hostLinger)
	if set.waitSessions > 0 {
		m.hosts.waitPlaces = make(chan struct{}, set.waitSessions)
		m.hosts.parkPhase = rand.Int64N(int64(parkTick))
	}
	return m, nil
}

// Bounds returns the loss-detection timings the Manager's keepalive settings give. Its
// Proxied field is set once a connection of the Manager was found to go through a proxy,
// TransactionPooler once that proxy was found to be a transaction pooler; HeartbeatTold
// is set where the Manager beats (WithHeartbeat, and by default behind a proxy).
func (m *Manager) Bounds() Bounds {
	b := computeBounds(m.set.clientKeepalive, m.set.serverKeepalive)
	b.Proxied = m.proxy.inPath()
	b.TransactionPooler = m.proxy.txPooled.Load()
	if m.set.heartbeat > 0 {
		b.HeartbeatTold = m.set.heartbeat + beatTimeout
	}
	return b
}

// Stat returns a snapshot of the Manager's connection pool: each held lock, and each Lock
// call waiting on the server, counts as one acquired connection.
func (m *Manager) Stat() *pgxpool.Stat { return m.pool.Stat() }

// Close releases every lock the Manager holds, ends every Lock call still waiting (they
// return an error wrapping [ErrClosed]), and closes the pool. It blocks until that is
// done: normally milliseconds; a lock whose release cannot be confirmed within 5 s has its
// connection closed, which frees it on the server; a cancel request still unanswered is
// waited for (up to 15 s: see [WithCancelGrace]). Later calls return at once; calls on
// the Manager then return [ErrClosed]. Locks ended by Close report [ErrLockLost]; on a
// transaction holding, the writes [Lock.BeginFunc] left waiting for the Unlock are rolled back.
func (m *Manager) Close() {
	m.mu.Lock()
	if m.closed {
		m.mu.Unlock()
		<-m.closeDone
		return
	}
	m.closed = true
	close(m.closing)
	live := make([]*pin, 0, len(m.sessions))
	for s := range m.sessions {
		live = append(live, s)
	}
	m.mu.Unlock()
	for _, s := range live {
		s.shutdown()
	}
	m.active.Wait()
	if m.poller != nil {
		m.poller.Stop()
	}
	m.slices.stop()
	m.pool.Close()
	awaitCancels(&m.proxy.cancels, m.set.logger)
	close(m.closeDone)
}

// cancelsWait bounds how long Close waits for the server to answer the cancel requests
// still in flight. PgBouncer gives up on a cancel after its cancel_wait_timeout (10 s by
// default) and closes it.
const cancelsWait = 15 * time.Second

// awaitCancels waits, bounded by cancelsWait, until the server has answered every cancel
// request of c (a Manager's connections'): a program that exits right after Close would
// otherwise abandon them, and PgBouncer 1.18 exits on an abandoned cancel.
func awaitCancels(c *cancelreq.Cancels, logger *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), cancelsWait)
	defer cancel()
	if c.Wait(ctx) != nil {
		logAttrs(logger, slog.LevelWarn, "advisory: closed with cancel requests still unanswered by the server",
			slog.Int("open", c.Open()), slog.Duration("waited", cancelsWait))
	}
}

func (m *Manager) isClosed() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.closed
}
