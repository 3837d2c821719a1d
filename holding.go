package advisory

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// Two kinds of holding. A held lock stands on a lease that PostgreSQL ties its life to:
// the server session itself (pg_advisory_lock, released by pg_advisory_unlock or the
// session's end), or an open transaction (pg_advisory_xact_lock, released by its COMMIT,
// its ROLLBACK or the session's end). A transaction-pooling proxy keeps a client on one
// server session only for a transaction's length, so behind one only the second kind can
// hold a lock. The kind is the Manager's (see WithHolding); each pin carries it as its
// lease, the one place where the two differ (lease_session.go, lease_tx*.go).
// docs/architecture.md shows the two side by side; docs/guarantees.md compares them,
// guarantee by guarantee.

// Holding is the kind of lease a Manager holds its locks on: the server session, or an
// open transaction. [WithHolding] chooses it; [Manager.Holding] reports what New chose.
type Holding int

const (
	// HoldingAuto holds by session on a direct connection and through a session pooler or
	// a TCP proxy, and by transaction behind a transaction-pooling proxy (PgBouncer
	// pool_mode=transaction, Supabase's port 6543, Neon's -pooler endpoints, RDS Proxy),
	// which New detects. The default.
	HoldingAuto Holding = iota
	// HoldingSession holds every lock on a server session of its own; New and Lock refuse
	// a transaction-pooling proxy with [ErrPooler].
	HoldingSession
	// HoldingTransaction holds every lock as one open transaction on its connection, also
	// where the connection is direct.
	HoldingTransaction
)

// String returns "auto", "session" or "transaction".
func (h Holding) String() string {
	switch h {
	case HoldingAuto:
		return "auto"
	case HoldingSession:
		return "session"
	case HoldingTransaction:
		return "transaction"
	}
	return fmt.Sprintf("Holding(%d)", int(h))
}

// Holding returns the kind of lease the Manager's locks stand on, as New chose it:
// [HoldingSession] or [HoldingTransaction]. It does not block.
func (m *Manager) Holding() Holding { return m.lease.kind() }

// A lease is what a pin's locks stand on, and how they are taken and let go there. Its
// methods are called by the goroutine that owns the pin's connection (see pin); a lease
// keeps no state of its own: what it needs lives on the pin.
type lease interface {
	kind() Holding
	// statements are the SQL texts of one lock t on a connection (direct: see
	// look.directPath).
	statements(m *Manager, t target, direct bool) statements
	// take runs the pin's lock statement, or with try its try statement, as a lock wait
	// (see waitRow), and returns as pin.row does: the backend's pid, and whether the lock
	// was granted; nil if the statement did nothing (it ran on another client's backend).
	take(p *pin, ctx context.Context, try bool) (pid uint32, got *bool, err error)
	// check fails a take loudly (closing the connection) if it ran where the pin's lease
	// is not: another client's backend, another client's prepared statement.
	check(p *pin, pid uint32, got *bool, err error) error
	// clear makes a pin whose take failed, or came back after ctx ended, hold nothing,
	// on the same connection; cancelSent: a CancelRequest may still strike.
	clear(p *pin, cancelSent bool) error
	// unlock releases what the pin holds on the server, its watcher stopped. It returns
	// nil only if the server confirmed the release. keep says whether writes the holding
	// made (a transaction holding's BeginFunc) commit with it: they do at an Unlock or a
	// Session's Close, never at the Manager's Close, after which the holding reports a loss.
	unlock(p *pin, ctx context.Context, keep bool) error
	// idle is the connection's transaction status ('I', 'T') while the pin holds its locks
	// and nothing runs on it.
	idle() byte
	// beginFn starts the transaction that BeginFunc runs fn in, on the held connection
	// (a transaction of its own, or a savepoint in the holding's), and commitFn ends it
	// once fn returned nil: committed reports that fn's writes are durable now.
	beginFn(p *pin, ctx context.Context, opts pgx.TxOptions) (pgx.Tx, error)
	commitFn(p *pin, ctx context.Context, tx pgx.Tx) (committed bool, err error)
	// open readies a Session's connection before its first lock; takeKeys runs a
	// Session's lock statement for ts, none held yet, as a lock wait (pid, nil where it
	// did nothing, the keys a try found held elsewhere); keepKeys settles a take that got
	// every key, clearKeys one that did not, releasing any of keys it got; unlocksOne
	// reports whether a Session can release one lock alone.
	open(p *pin, ctx context.Context) error
	takeKeys(p *pin, ctx context.Context, ts []target, try bool) (pid uint32, owned *bool, busy []int64, err error)
	keepKeys(p *pin, cancelSent bool) error
	clearKeys(p *pin, keys []int64, cancelSent bool) error
	unlocksOne() bool
	// bumpToken takes the holding's fencing token (see Lock.Token), and announce runs a
	// leader announcement, announceSQL or publishSQL with its args (see Lock.Publish),
	// returning the rows it returned (none: it did nothing). Each commits on its own,
	// only while the holding holds the lock; the caller has borrowed the connection.
	bumpToken(p *pin, ctx context.Context) (int64, error)
	announce(p *pin, ctx context.Context, sql string, args []any) (int, error)
	// withdraw runs sql (withdrawSQL), deleting the value the holding published, as its
	// release begins: on the holding session, or beside the holding transaction.
	withdraw(p *pin, ctx context.Context, sql string) error
	// keeps reports whether a lock's connection may pass to another holding as it is:
	// an in-process handoff, with no statement (see passOn).
	keeps(p *pin) bool
}

// leaseFor returns the lease of a Manager's kind.
func leaseFor(h Holding) lease {
	if h == HoldingTransaction {
		return txLease{}
	}
	return sessionLease{}
}

// chooseHolding is the kind of holding of a Manager asked for h, once its first
// connection's set-up found out what is in the path (ps).
func chooseHolding(h Holding, ps *proxyState) Holding {
	if h == HoldingTransaction || h == HoldingAuto && ps.txPooled.Load() {
		return HoldingTransaction
	}
	return HoldingSession
}

// beatTimeout bounds one heartbeat: past it the beat fails, which ends the holding.
const beatTimeout = cleanupTimeout
