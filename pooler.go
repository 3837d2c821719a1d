package advisory

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory/internal/cancelreq"
)

// probeRounds is how many times the proxy probe compares two connections' backends.
// Each round gives a transaction pooler another chance to give itself away.
const probeRounds = 8

// proxyState records what the Manager's connections found out about the path to the
// server. It is shared by every connection's setup and the Manager.
type proxyState struct {
	logger   *slog.Logger
	holding  Holding       // what the Manager was asked for (WithHolding)
	blind    bool          // tests only: the probe finds nothing (see export_test.go)
	proxied  atomic.Bool   // a proxy that answers the startup with a BackendKeyData of its own
	spliced  atomic.Bool   // a TCP proxy that passes the server's through (see notePath)
	txPooled atomic.Bool   // a transaction pooler: client connections share server sessions
	chosen   atomic.Int32  // the Holding New chose, once chosen (0 before: HoldingAuto)
	timeline atomic.Uint32 // the newest primary timeline a connection reached (see noteTimeline)
	warn     sync.Once
	// cancels keeps the Manager's cancel connections open until the server answers them:
	// an abandoned cancel crashes PgBouncer 1.18 (see cancelreq.Cancels).
	cancels cancelreq.Cancels
}

// probe tells a session pooler or TCP proxy, which gives each client connection a backend
// of its own for the connection's life, from a transaction (or statement) pooler, which
// hands an idle backend to whichever client runs a statement next. Each round, conn
// reports its backend, then a second connection reports its own and whether conn's
// backend is busy (see busySQL) while conn is idle. A transaction pooler gives itself
// away three ways: conn's statement runs on another backend than before; the second
// connection's runs on conn's (PgBouncer reuses the most recently used idle server
// connection first: this catches a quiet pooler); or conn's backend runs another
// client's statement while conn runs none (this catches a busy one, whose clients take
// each backend as soon as it is released). Measured through PgBouncer (transaction mode,
// 3 server connections, 0 to 12 background clients, CPUs idle or busy), the first two
// alone missed the pooler 3 times in 1,000; with the third, 0 times in 21,000; through
// session mode none of 6,000 probes took it for a transaction pooler. A round whose
// statements a load balancer sent to a standby (Pgpool-II with load_balance_mode: its
// sessions keep their backends, one per server, so it is no transaction pooler) shows
// nothing and is skipped (see backendSQL). It reports
// whether the proxy shares backends, and fails with ErrPooler for a statement pooler,
// which refuses transactions.
func probe(ctx context.Context, conn *pgx.Conn, pid uint32, blind bool) (shared bool, err error) {
	if blind {
		return false, nil
	}
	cfg := conn.Config().Config.Copy()
	other, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		return false, fmt.Errorf("advisory: check the proxy in front of the server: %w", err)
	}
	defer other.Close(ctx)
	busy := busySQL(pid)
	for range probeRounds {
		mine, err := probeRow(ctx, conn.PgConn(), backendSQL)
		if err != nil {
			return false, err
		}
		theirs, err := probeRow(ctx, other, busy)
		switch {
		case err != nil:
			return false, err
		case mine.standby || theirs.standby:
			// A load balancer (Pgpool-II) sent a statement to a standby: no sign either way
			// of how the primary's backends are shared. Every lock statement proves that it
			// runs on a primary itself (see onPrimary).
			continue
		case mine.pid != pid || theirs.pid == mine.pid || theirs.busy:
			return true, checkTransactions(ctx, other, theirs.pid)
		}
	}
	return false, nil
}

// probeSeen is what one probe statement found: its backend, whether that backend is
// busy (busySQL only), and whether it is a standby's.
type probeSeen struct {
	pid           uint32
	busy, standby bool
}

// probeRow runs a probe statement (backendSQL or busySQL) on pg.
func probeRow(ctx context.Context, pg *pgconn.PgConn, sql string) (probeSeen, error) {
	rows, err := pg.Exec(ctx, sql).ReadAll()
	if err != nil {
		return probeSeen{}, fmt.Errorf("advisory: check the proxy in front of the server: %w", err)
	}
	row, err := onlyRow(rows, 3, "the proxy probe")
	if err != nil {
		return probeSeen{}, err
	}
	pid, err := parseUint32(row[0], "pg_backend_pid()")
	return probeSeen{pid: pid, busy: string(row[1]) == "t", standby: string(row[2]) == "t"}, err
}

// backendSQL is the probe's first statement: its backend, and whether it is a standby's
// (with a constant in busySQL's place). Each probe statement asks pg_is_in_recovery(),
// which is VOLATILE: a load balancer that sends only reads to standbys (Pgpool-II takes a
// statement with a VOLATILE function for a write) sends it where it sent lookSQL, which
// asks it too; one that balances it anyway shows it (see probe).
const backendSQL = "SELECT pg_catalog.pg_backend_pid(), false, pg_catalog.pg_is_in_recovery()"

// busySQL returns the probe's second statement: its own backend, whether backend pid
// is running a statement or holds a transaction open (pg_stat_activity's state), and
// whether its backend is a standby's (see backendSQL). The
// probe sends it while its first connection, whose backend pid is, runs nothing: behind
// a session pooler or TCP proxy that backend is idle then (a backend reports itself idle
// before it tells its client it is ready). A state the server hides (another role's
// backend, without pg_read_all_stats) or does not track (track_activities off:
// "disabled") is no sign either way.
func busySQL(pid uint32) string {
	return "SELECT pg_catalog.pg_backend_pid(), EXISTS (SELECT FROM pg_catalog.pg_stat_activity WHERE pid " +
		"OPERATOR(pg_catalog.=) " + strconv.FormatUint(uint64(pid), 10) + " AND pid OPERATOR(pg_catalog.<>) " +
		"pg_catalog.pg_backend_pid() AND state OPERATOR(pg_catalog.=) ANY (ARRAY['active', 'idle in transaction', " +
		"'idle in transaction (aborted)', 'fastpath function call'])), pg_catalog.pg_is_in_recovery()"
}

// checkTransactions tells a transaction pooler, which keeps a client on one server
// session for a transaction's length, from a statement pooler, which refuses a
// transaction block (PgBouncer ends the connection: "transaction blocks not allowed in
// statement pooling mode"). other is the probe's own connection: a statement pooler may
// close it.
func checkTransactions(ctx context.Context, other *pgconn.PgConn, pid uint32) error {
	_, err := other.Exec(ctx, "BEGIN").ReadAll()
	if err == nil {
		_, err = other.Exec(ctx, "ROLLBACK").ReadAll()
	}
	if err != nil {
		return fmt.Errorf("%w: statement pooling: the pooler hands server sessions (pid %d) from client to client "+
			"statement by statement and refused a transaction block (%w); no kind of advisory lock can be held "+
			"there: connect through transaction or session pooling, or directly", ErrPooler, pid, err)
	}
	return nil
}

// sharing handles a sign, found by the set-up of a new connection (what says which),
// that the proxy in the path shares backends between clients: a transaction pooler. A
// Manager that may hold by transaction notes it and sets the connection up for
// transaction holdings (see txPooledConn); one asked for session holdings, or whose New
// chose them, fails with ErrPooler: no session-level lock can be held there. On New's
// own connections (before it chose) the error is a *poolerSign, which New turns into
// its refusal (settings.check).
func (ps *proxyState) sharing(pg *pgconn.PgConn, seen look, what string) error {
	switch {
	case ps.holding == HoldingSession && Holding(ps.chosen.Load()) == HoldingAuto:
		return &poolerSign{what}
	case ps.holding == HoldingSession:
		return fmt.Errorf("%w: %s: a transaction pooler, through which no session-level lock can be held, and "+
			"the Manager was asked for session holdings (WithHolding(HoldingSession)): let it hold by transaction "+
			"(the default), or connect directly or through session pooling", ErrPooler, what)
	case Holding(ps.chosen.Load()) == HoldingSession:
		return fmt.Errorf("%w: %s: a transaction pooler, of which New found no sign when it chose session "+
			"holdings for the Manager; no session-level lock can be held through it: create the Manager with "+
			"WithHolding(HoldingTransaction), or connect directly or through session pooling", ErrPooler, what)
	}
	ps.noteTxPooler()
	txPooledConn(pg, seen)
	return nil
}

// A poolerSign is a sign, found on one of New's connections set up for session
// holdings, that the proxy in the path shares backends between clients: by the set-up of
// a Manager asked for session holdings (see sharing), or by New's self-test (the probe
// can miss a busy transaction pooler). New holds by transaction after all where it may,
// and otherwise refuses the pooler (settings.check), naming what gave it away. It wraps
// ErrPooler.
type poolerSign struct{ what string }

func (e *poolerSign) Error() string { return ErrPooler.Error() + ": " + e.what }
func (e *poolerSign) Unwrap() error { return ErrPooler }

// noteTxPooler records that the path to the server goes through a transaction pooler.
// New says so, and what it chose, once at Info.
func (ps *proxyState) noteTxPooler() {
	ps.proxied.Store(true)
	ps.txPooled.Store(true)
}

// inPath reports whether any proxy was found in the path: one with a BackendKeyData of
// its own, or a TCP proxy that splices the connection (see Bounds.Proxied).
func (ps *proxyState) inPath() bool { return ps.proxied.Load() || ps.spliced.Load() }

// noteProxy records that the path to the server goes through a proxy, and says once, at
// Warn, what that means for the release bound.
func (ps *proxyState) noteProxy() {
	ps.proxied.Store(true)
	ps.warnProxy()
}

// noteSpliced records that the path goes through a TCP proxy that passes the server's
// BackendKeyData through (see notePath), and warns as noteProxy does. The connection is
// still taken for its backend's own, as before: only the heartbeat and Bounds change.
func (ps *proxyState) noteSpliced() {
	ps.spliced.Store(true)
	ps.warnProxy()
}

func (ps *proxyState) warnProxy() {
	if ps.logger == nil {
		return
	}
	ps.warn.Do(func() {
		logAttrs(ps.logger, slog.LevelWarn,
			"advisory: the connection goes through a proxy (session pooler, TCP proxy or address translation): the server-side "+
				"release bound no longer holds: how long a cut-off holder's lock stays depends on the proxy's "+
				"keepalive toward its clients; the holder is still told within the client bound, and of a server that stops "+
				"answering by the heartbeat, on by default behind a proxy (see docs/keepalive.md)")
	})
}

// reportHolding says once, at Info, what New found in the path and chose, where it is a
// transaction pooler.
func (ps *proxyState) reportHolding(kind Holding, heartbeat time.Duration) {
	if ps.logger == nil || !ps.txPooled.Load() || kind != HoldingTransaction {
		return
	}
	logAttrs(ps.logger, slog.LevelInfo, "advisory: the connection goes through a transaction pooler (client "+
		"connections share server sessions between transactions): each lock is held as one open transaction "+
		"(BEGIN; pg_advisory_xact_lock), released by its COMMIT (see docs/guarantees.md, \"Transaction holdings\")",
		slog.String("holding", kind.String()), slog.Duration("heartbeat", heartbeat))
}
