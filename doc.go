// Package advisory turns PostgreSQL session-level advisory locks into a distributed lock
// for Go services: one holder at a time across every process that shares a database,
// with no lock table, no TTL and no cleanup job. The lease is the server session (behind
// a transaction pooler, an open transaction on it): by default each held lock pins a
// connection of the [Manager]'s pool of its own, and its options can let holdings share
// one ([WithSharedSessions]); when the holder dies or is cut off, its session ends and
// PostgreSQL frees the lock. docs/locking.md is the long form of this map;
// docs/guarantees.md says who learns what, and when.
//
// # Handles
//
//   - [Manager]: one per database per process ([New]); it owns the pool and the settings.
//   - [Lock]: one held lock ([Manager.Lock], [Manager.TryLock]; shared, raw [Key] and
//     [Pair] forms), on a connection of its own unless it shares one
//     ([Lock.SharesSession]) or re-enters a holding ([Lock.Reentered]).
//   - [Session]: many locks on one connection, taken in one statement ([Session.LockAll]).
//   - [Semaphore]: up to N holders at once across processes ([Manager.Semaphore]).
//
// # Work under a lock
//
// [Manager.Do] runs a function while holding a lock, [Manager.TryDo] a scheduled job on
// one replica of many, [Manager.Lead] a leader-only loop (followers watch it with
// [Manager.Observe]); [XactLock] locks inside a caller's transaction. Before the function runs, work an earlier holder left running on
// the server is drained ([Lock.Drain], [LockFromContext]). Reentrancy is by ctx: a lock
// call whose ctx carries a holding of the same lock re-enters it at once
// ([ContextWithLock], [Lock.Reentered]), or fails with [ErrNotReentrant].
//
// # Loss, cancellation and fencing
//
// Every blocking call takes a ctx, and a cancelled wait leaves nothing held. A holder is
// told of a loss ([Lock.Done], [Lock.Err] wrapping [ErrLockLost]) before the server can
// grant the lock to another ([Bounds]). Writes a stale holder makes can be refused by the
// database itself: [Lock.BeginFunc], [Manager.DoTx], [Lock.Token], [Manager.CheckToken].
//
// # Keys, servers, errors
//
// A name hashes to the key hashtextextended(name, 0) gives, so psql can take the same
// lock ([KeyOf]). PostgreSQL 12+ works directly or behind a session-mode proxy, and
// behind a transaction pooler, where each lock is held as one open transaction
// ([WithHolding], [Manager.Holding]); statement poolers ([ErrPooler]), standbys
// ([ErrStandby]) and engines that do not enforce advisory locks ([ErrUnsupportedServer])
// are refused. Errors wrap one of the
// Err* sentinels with their cause (test with errors.Is); messages start with "advisory:"
// and never contain a password.
package advisory
