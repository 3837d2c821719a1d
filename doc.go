// Package advisory turns PostgreSQL session-level advisory locks into a distributed lock
// for Go services: one holder at a time across every process that shares a database,
// with no lock table, no TTL and no cleanup job.
//
// # The lease is the session
//
// A held lock lives exactly as long as the server session that took it. Each lock pins a
// connection from the [Manager]'s pool; when the holder's process dies, its host vanishes
// or the network is cut, the connection ends and PostgreSQL frees the lock. TCP keepalive
// is set on both ends so that, after a silent partition, the holder is told before the
// server can free the lock; [New] refuses settings that would break that order (see
// [Bounds], docs/keepalive.md and docs/guarantees.md).
//
// # Manager, Lock, Session: which to use
//
//   - [Manager] owns the pool and the settings. Make one per database per process, with
//     [New] or [NewWithConfig], and Close it at exit.
//   - [Manager.Lock] blocks until the lock is held (the wait happens on the server: no
//     polling) or ctx ends; [Manager.TryLock] fails at once with [ErrLocked] if the lock
//     is held elsewhere. Each returns a [Lock], which pins its own connection: one lost
//     connection loses one lock. This is the right call for a few locks at a time.
//   - [Manager.Do] runs a function under a lock and releases it afterwards, also when the
//     function panics; the function's ctx is cancelled if the lock is lost.
//   - [Manager.TryDo] runs a scheduled job on one replica of many: it tries the lock
//     once, skips if another replica has it, and after the function keeps the lock for a
//     given time so that late timers skip too (docs/jobs.md).
//   - [Manager.Lead] campaigns for a name for as long as ctx lasts and runs a function
//     only while this process leads: a leader-only loop, campaigning again after a loss.
//   - [Session] pins one connection for many locks (thousands, taken in one statement
//     with [Session.LockAll]); they share that connection's fate.
//   - [Manager.Semaphore] lets up to N holders in at once, across processes:
//     [Semaphore.Acquire] blocks until one of its N slots is held (each slot is an
//     ordinary lock on "NAME#slot/i"), [Semaphore.TryAcquire] fails with [ErrLocked]
//     when all are taken. Waiters queue first come first served on a turnstile lock; the
//     first waits on the server for a slot and hears of other freed slots by NOTIFY,
//     re-checking at the latest every [SemaphoreRecheck] (a crashed holder sends none).
//     See docs/semaphore.md.
//   - [XactLock] takes a transaction-scoped lock inside a caller's pgx.Tx, freed
//     at commit or rollback.
//   - [Manager.Holders] says who holds or waits for a lock: backend pid,
//     application_name (sessions are named "PROGRAM HOST/PID" unless the connection
//     string names them), client address, since when.
//
// Exclusive locks exclude everyone; shared locks ([Manager.LockShared]) exclude only
// exclusive ones. Locks of a Manager are not reentrant: a second Lock of a name the
// Manager holds waits for the first to be released. Locks on a Session are reentrant and
// counted. Within one Manager, Lock calls for one name queue in the process, first come
// first served, so that N waiting goroutines pin at most two connections.
//
// # Keys
//
// A lock name is hashed to the int64 key PostgreSQL's hashtextextended(name, 0) gives, so
// psql can take the same lock: SELECT pg_advisory_lock(hashtextextended('migrations', 0)).
// Raw keys ([Manager.LockKey]) and the two-int4 form ([Pair]) are accepted too. See
// [KeyOf], [ValidateName], [WithNamespace] and docs/keys.md.
//
// # Cancellation and loss
//
// Every blocking call takes a ctx. A Lock whose ctx ends returns an error for which
// errors.Is(err, ctx.Err()) holds, promptly, and the lock is not held: the server stops
// waiting, and a grant that raced the cancel is released before Lock returns.
//
// A holder must be ready for its lock to be lost: its session can be terminated, the
// server restarted, the network cut. A watcher reads each idle held connection, so a
// terminated session or a shutdown is seen within milliseconds and a silent partition
// within the client keepalive bound (10 s by default). [Lock.Done] then closes and
// [Lock.Err] wraps [ErrLockLost]. A connection that may hold a lock is never handed back
// to the pool: on any doubt it is closed, which frees the lock on the server.
//
// # Fencing
//
// No lock service can stop a holder that stalls (a GC pause, a frozen VM) and writes
// after its lock has gone to another. Here the lease is a database session, so the
// database can refuse those writes itself: [Lock.BeginFunc] runs a transaction on the
// lock's own connection, which can only commit while the session, and so the lock,
// exists. [Manager.DoTx] is Lock, BeginFunc, Unlock in one call; [Session.BeginFunc] is
// fenced by all a Session's locks. For writes on other connections or to other systems,
// [Lock.Token] gives a number greater than every earlier holder's, and
// [Manager.CheckToken] makes a write in any transaction of this database conditional on
// it. See docs/fencing.md.
//
// # The work, not only the lock
//
// The work a lock protects usually runs on other sessions (a migration tool's own
// connections), and a dead holder's backend runs on until it next touches its socket. Do,
// DoTx, TryDo and Lead therefore drain before fn: sessions tagged for an earlier holding
// of the lock are waited for, then terminated ([Lock.Drain]). Tag fn's connections with
// the Lock from [LockFromContext] ([Lock.WorkConnString], [Lock.WorkConfig],
// [Lock.WorkEnv]). See docs/work.md.
//
// # Where it works
//
// PostgreSQL 12 and later, directly or through a proxy that gives each client its own
// server session (PgBouncer and other poolers in session mode, TCP proxies). A
// transaction- or statement-pooling proxy is detected and refused with [ErrPooler]: no
// call ever takes or releases a lock on another client's backend. A hot standby is
// refused with [ErrStandby]: advisory locks are not replicated. See docs/guarantees.md.
//
// # Errors
//
// Errors wrap one of the sentinels ([ErrLocked], [ErrLockLost], [ErrNotHeld],
// [ErrClosed], [ErrInvalidKey], [ErrInvalidOption], [ErrPooler], [ErrStandby],
// [ErrUnsupportedServer], [ErrPoolExhausted], [ErrTooManyLocks], [ErrLockTableFull],
// [ErrStaleToken], [ErrNoFenceTable], [ErrSharedToken], [ErrWorkNotDrained],
// [ErrCommitUnconfirmed]) together with their cause (a *pgconn.PgError, a network error,
// ctx.Err()): test with errors.Is and errors.As. Messages start with "advisory:" and
// never contain a password.
package advisory
