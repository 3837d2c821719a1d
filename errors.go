package advisory

import (
	"errors"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Errors returned by this package. Test for them with [errors.Is]; returned errors wrap
// them together with the cause (a *pgconn.PgError, a network error, ctx.Err()), so the
// cause stays reachable with [errors.As] and errors.Is.
var (
	// ErrLocked means TryLock found the lock held by another session. The error is a
	// *[LockedError] naming the lock; [Manager.Holders] says who holds it (pid,
	// application_name, client address, since when).
	ErrLocked = errors.New("advisory: lock is held by another session")

	// ErrLockLost means a held lock ended without Unlock: its connection was terminated,
	// the server restarted or shut down, the network failed, or the Manager was closed.
	// Assume another process may hold the lock now.
	ErrLockLost = errors.New("advisory: lock lost")

	// ErrNotHeld is returned by Unlock on a Lock that was already released by Unlock, and
	// by Lock.Err after a clean Unlock.
	ErrNotHeld = errors.New("advisory: lock not held")

	// ErrClosed is returned by every Manager method after Close, and by Lock calls that
	// were waiting when Close was called.
	ErrClosed = errors.New("advisory: manager closed")

	// ErrInvalidKey is returned for a lock name that cannot be used (see [ValidateName]).
	ErrInvalidKey = errors.New("advisory: invalid key")

	// ErrInvalidOption is returned by New and NewWithConfig for an option or connection
	// setting that is out of range or would break the loss-detection guarantee, and by New
	// for a connection string it cannot parse.
	ErrInvalidOption = errors.New("advisory: invalid option")

	// ErrPooler means a connection pooler in the path shares server sessions between
	// clients, where no lock of the kind the Manager holds can live. A statement pooler
	// (PgBouncer pool_mode=statement) hands each statement to any server session and
	// refuses transactions: no lock can be held there. A transaction pooler (PgBouncer
	// pool_mode=transaction, Supabase's port 6543, Neon's -pooler endpoints, RDS Proxy)
	// keeps a client on one server session for a transaction's length only: a Manager
	// holds its locks as transactions there (see [WithHolding]), unless it was asked for
	// session holdings (WithHolding(HoldingSession)), which fail with ErrPooler. New checks
	// for a pooler before it changes anything on the server; every session-level lock
	// statement checks, in the same statement, that it runs on its connection's own
	// backend and does nothing otherwise, so no call ever takes or releases a lock on
	// another client's backend.
	ErrPooler = errors.New("advisory: a connection pooler in the path shares server sessions between clients")

	// ErrStandby means the server is a hot standby (pg_is_in_recovery()): advisory locks
	// taken there are local to that standby and exclude nobody on the primary or other
	// standbys, so New, and any later connection of the Manager's pool, refuse it. Connect
	// to the primary, for example with a multi-host connection string and
	// target_session_attrs=read-write. Behind a load balancer (Pgpool-II) a lock call, or
	// XactLock and TryXactLock, returns it when its statement was sent to a standby: that
	// statement took nothing there (see docs/guarantees.md, "Load balancers and standbys").
	ErrStandby = errors.New("advisory: the server is a hot standby; advisory locks there are local to it")

	// ErrUnsupportedServer is returned by New, and by any call that opens a connection,
	// for a server older than PostgreSQL 12; and by New for a server that does not
	// enforce advisory locks (the same key granted to two sessions at once: CockroachDB's
	// stubs, YugabyteDB's no-op setting, or a pg_try_advisory_lock placed ahead of
	// pg_catalog's in the role's search_path).
	ErrUnsupportedServer = errors.New("advisory: unsupported server version")

	// ErrServerChanged is returned by New when its self-test's two connections, made
	// with the same connection string, reached two different servers (told apart by
	// address, port and postmaster start time): a proxy in round-robin over several
	// servers, or a proxy or multi-host string while a cluster switches over to a new
	// primary. It is retryable: once the switchover is over, New succeeds. Through a
	// proxy that spreads connections over independent servers no lock can be held:
	// connect to the primary alone. (It is never reported as ErrUnsupportedServer.) Any
	// call that opens a connection returns it for a primary on an older timeline than
	// one the Manager has reached: a primary deposed by a promotion and writable again
	// (a split brain), where a lock would exclude nobody locking on the new primary.
	ErrServerChanged = errors.New("advisory: the connections reached different servers")

	// ErrTransactionHolding means a call needs what only a lock held on a server session
	// of its own can do, and the Manager holds its locks as transactions (see
	// [WithHolding]): a [Session] cannot release one of its locks while it holds others
	// (transaction-level locks end only with their transaction; Close releases them all),
	// and [Lock.BeginTxFunc] cannot choose transaction options (fn runs in a savepoint of
	// the lock's own transaction, begun with the lock).
	ErrTransactionHolding = errors.New("advisory: the lock is held as a transaction")

	// ErrSharedSession means a call needs a server session of the lock's own, and the lock
	// shares its session with other holdings (see [WithSharedSessions]): a transaction on
	// it, a fencing token, its socket, a published value or a drain.
	ErrSharedSession = errors.New("advisory: the lock shares its session")

	// ErrNotReentrant means a call's ctx carries a holding of the lock (see
	// [LockFromContext]) that the call cannot re-enter, and waiting for it would wait for
	// the caller itself: an exclusive call under a shared holding of the same lock, a call
	// under another Manager's holding of the lock on the same server, a [Semaphore]
	// acquire under a slot of the same semaphore, or a re-entered Lock's BeginFunc (a
	// nested DoTx) while a transaction of its holding is in progress. The call returns it
	// at once, having taken and changed nothing. It is not [ErrLocked]: nobody else holds
	// the lock, and a retry would fail the same way.
	ErrNotReentrant = errors.New("advisory: the call would wait for a holding it runs under, and cannot re-enter it")

	// ErrTooManyLocks is returned when a Lock on a Session would take it past its cap (see
	// WithSessionLimits).
	ErrTooManyLocks = errors.New("advisory: too many locks on one session")

	// ErrLockTableFull means the server's shared lock table is full (SQLSTATE 53200, "out of
	// shared memory"): every session on the server now fails to take locks, and new
	// connections may fail too. Release locks, or raise max_locks_per_transaction (the table
	// holds about max_locks_per_transaction × (max_connections + max_prepared_transactions)
	// locks) and restart the server.
	ErrLockTableFull = errors.New("advisory: the server's lock table is full (SQLSTATE 53200): " +
		"release locks or raise max_locks_per_transaction")

	// ErrPoolExhausted means every connection of the Manager's pool is in use (each held
	// lock pins one) and no connection became free before ctx ended (Lock), or at once
	// (TryLock). Raise the pool size (pool_max_conns) or release locks sooner.
	ErrPoolExhausted = errors.New("advisory: connection pool exhausted")

	// ErrStaleToken is returned by [Manager.CheckToken] when a newer holder of the lock
	// has taken a fencing token: the write carrying the older token must be refused.
	ErrStaleToken = errors.New("advisory: stale fencing token: a newer holder has taken the lock")

	// ErrNoFenceTable means the fencing table that [Lock.Token] and [Manager.CheckToken]
	// use cannot be used: it does not exist, or it has the layout of an earlier version of
	// this package (rows keyed by the key alone, without the pair column; the error then
	// says so in its own words). [Manager.CreateFenceTable] is the remedy for both: it
	// creates the table, or upgrades it in place.
	ErrNoFenceTable = errors.New("advisory: the fencing table does not exist (create it with Manager.CreateFenceTable)")

	// ErrNoLeaderTable means a published leader value cannot be stored or read: the
	// Manager has no [WithLeaderTable] (for [Lock.Publish] with a value), or the table
	// does not exist ([Manager.CreateLeaderTable] creates it).
	ErrNoLeaderTable = errors.New("advisory: no leader table (give WithLeaderTable and create it with Manager.CreateLeaderTable)")

	// ErrSharedToken is returned by [Lock.Token] on a lock held in shared mode. Tokens
	// order exclusive holders: each is newer than every earlier one. Shared holders hold at
	// once, so no token can say which of them is the newest, and the one that took its
	// token first would be refused while it still holds the lock. Take the lock
	// exclusively for fenced writes.
	ErrSharedToken = errors.New("advisory: a shared lock has no fencing token: " +
		"shared holders hold at once, so no token can say which is newest; take the lock exclusively for fenced writes")

	// ErrWorkNotDrained is returned by [Lock.Drain] (and by Do, DoTx, TryDo and Lead,
	// which then do not call fn; Lead campaigns again) when a server session of an
	// earlier holder's work is still running and cannot be ended: the role may not
	// terminate it (a session of a [WithWorkRoles] role; the error names the privilege to
	// grant), or it did not go within 10 s of its termination. Starting the work then
	// could overlap the earlier holder's.
	ErrWorkNotDrained = errors.New("advisory: an earlier holder's work is still running")

	// ErrCommitUnconfirmed means a commit the library made for the caller ([Lock.Token],
	// [Lock.BeginFunc], [Manager.DoTx], [Session.BeginFunc], [Manager.CreateFenceTable])
	// happened on the server it is connected to, but the server could not confirm it as
	// synchronous_commit promises: its wait for synchronous replication was cancelled, and
	// the server said so with a WARNING. After a failover to a standby the commit may be
	// gone. Token then returns no token (the next call takes a new one); a transaction's
	// writes must be treated as in doubt.
	ErrCommitUnconfirmed = errors.New("advisory: commit not confirmed: committed locally, durability unknown")

	// ErrFencedStatement means fenced work ([Lock.BeginFunc], [Manager.DoTx],
	// [Session.BeginFunc]) sent a statement that would end or leave the fenced
	// transaction (BEGIN, COMMIT, ROLLBACK, END, PREPARE TRANSACTION, a release of the
	// library's savepoint), change the lock connection's session (a session-level SET,
	// RESET, set_config(..., false), DISCARD), or release advisory locks
	// (pg_advisory_unlock*). The statement was refused before it reached the server; the
	// transaction counts as failed and is rolled back when fn returns; the lock is kept.
	ErrFencedStatement = errors.New("advisory: fenced work may not run this statement")
)

// LockedError is returned by TryLock when another session holds the lock. It wraps
// [ErrLocked].
type LockedError struct {
	Key Key
	// Name is the lock name passed to TryLock, empty for a raw key.
	Name string
	// Pair is true for a key in the two-int4 form (see [Pair]).
	Pair bool
}

// Error says which lock is held elsewhere.
func (e *LockedError) Error() string {
	return "advisory: lock " + describe(e.Key, e.Name, e.Pair) + " is held by another session"
}

// Unwrap returns [ErrLocked].
func (e *LockedError) Unwrap() error { return ErrLocked }

// opError is an error of one operation on one lock. It prints a single "advisory:"
// prefix however deep the cause, and unwraps to the cause.
type opError struct {
	op   string // "lock", "try lock", "unlock"
	what string // the quoted name, or the key
	err  error
}

func (e *opError) Error() string {
	return "advisory: " + e.op + " " + e.what + ": " + strings.TrimPrefix(e.err.Error(), "advisory: ")
}

func (e *opError) Unwrap() error { return e.err }

// causeError is an error of the library around a cause that may be one of its own (a
// sentinel, another causeError): it prints msg and the cause without the cause's
// "advisory: " prefix, so that the text carries one, and unwraps to the cause.
type causeError struct {
	msg string // "advisory: connect"
	err error
}

func (e *causeError) Error() string {
	return e.msg + ": " + strings.TrimPrefix(e.err.Error(), "advisory: ")
}

func (e *causeError) Unwrap() error { return e.err }

// describe names a lock in messages: its quoted name, or its key for a raw key.
func describe(key Key, name string, pair bool) string {
	switch {
	case name != "":
		return quote(name)
	case pair:
		return pairOf(key).String()
	}
	return key.String()
}

// sqlState returns the SQLSTATE of the server's error in err's chain, or "" if it holds
// none (a network error, a ctx's).
func sqlState(err error) string {
	if err == nil { // the common case, without the heap allocation of pgErr (issue 47)
		return ""
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}
