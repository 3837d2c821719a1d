package advisory

import (
	"fmt"
	"time"
)

// The options that decide what a Manager's locks stand on and how its calls share
// connections: the kind of holding, shared sessions and the waits beside them, a
// Session's limits, and the in-process handoff. options_check.go decides how they
// combine with each other and with the path New finds.

// WithHolding chooses what the Manager's locks stand on. The default, [HoldingAuto], holds
// each lock on a server session of its own, as pg_advisory_lock does, unless New finds a
// transaction-pooling proxy in the path: then each lock is held as one open transaction
// (BEGIN; pg_advisory_xact_lock), which such a proxy keeps on one server session until
// it ends, and New logs that choice once at Info. [HoldingSession] asks for session
// holdings only: a transaction pooler is then refused with [ErrPooler]. A statement
// pooler is refused whatever the choice. [HoldingTransaction] holds by transaction
// everywhere.
//
// A transaction holding keeps every guarantee of a session holding but these
// (docs/guarantees.md has the full table): [Lock.BeginFunc]'s writes commit when the lock
// is released, with its COMMIT, not when BeginFunc returns (never if the lock is lost, the
// Manager's Close included); a [Session] releases its
// locks only all at once, with Close; behind a proxy, [Manager.Observe] re-checks on a
// timer instead of listening, and a heartbeat is on by default (see [WithHeartbeat]).
// Behind a transaction pooler each held lock, and each Lock waiting for one, keeps one of
// the pooler's server connections for as long as it holds or waits: size the pooler's
// pool for them, and for the work they protect.
//
// What New refuses: HoldingSession behind a transaction pooler, with [ErrPooler] (it works
// directly and through a session pooler); transaction holdings with [WithSharedSessions],
// with [ErrInvalidOption] (HoldingTransaction before connecting; HoldingAuto once New
// finds a transaction pooler, which a direct connection never is); and transaction
// holdings with WithHeartbeat(0) behind any proxy ([WithHeartbeat]), with
// ErrInvalidOption.
func WithHolding(h Holding) Option {
	return option(func(s *settings) error {
		if h < HoldingAuto || h > HoldingTransaction {
			return fmt.Errorf("%w: holding %v: want HoldingAuto, HoldingSession or HoldingTransaction", ErrInvalidOption, h)
		}
		s.holding = h
		return nil
	})
}

// WithSharedSessions lets the Manager's holdings share server sessions, up to perSession
// on one: a Lock, TryLock or their Shared and Key forms whose lock is free is taken on a
// session that already holds other locks of this Manager; only a Lock that has to wait
// waits on a session of its own, as without the option. A session that holds nothing
// stays open 100 ms for the next call, then goes back to the pool; a call that needs a
// connection while this Manager's sessions pin every one of the pool takes a resting
// session's at once (it waits for the session's close, one statement), and while calls
// wait for a connection no session rests, so a resting session never makes a TryLock
// fail with [ErrPoolExhausted] or a Lock wait. A shared session sends the tries and
// unlocks queued for it in one statement, so a process needs one shared session per 64
// calls in flight, plus one connection per wait
// ([WithWaitSessions] bounds those on keys that are merely held), not one per held lock:
// see docs/scale.md. Connections follow the calls in flight, not the holdings: a burst
// of Locks taken at once opens shared sessions as its calls queue (up to the pool's
// pool_max_conns, the cap to set for bursts), and a session goes back to the pool only
// once it has held nothing for 100 ms, so the holdings a burst leaves can stay spread
// over the sessions it opened. It does not block.
//
// What sharing a session costs:
//   - a shared fate: if the session is lost (terminated, cut off, its server restarted),
//     every holding on it is lost, each one told on its own Done and Err;
//   - a holding on a shared session has no session of its own to lend: [Lock.BeginFunc],
//     [Lock.BeginTxFunc], [Lock.Token], [Lock.File], [Lock.Publish] and [Lock.Drain]
//     return an error wrapping [ErrSharedSession]. The work fencing of [Lock.WorkConnString],
//     [Lock.WorkEnv] and [Lock.WorkConfig] works: the tag names the holding, and the next
//     holder's drain finds its work. [Manager.Do] and TryDo (unless [WithoutDrain]: then
//     their locks may be shared too, and fn's Lock has no session of its own to drain
//     with), DoTx, Lead, LeadAs, Semaphores and a [Session] take their locks on sessions
//     of their own, as without the option, since they need one;
//   - a shared session's statements are batches that name no lock: [Manager.Holders]
//     shows its locks by key (see docs/scale.md), with or without [WithoutNamesInActivity];
//   - a Lock taken on a shared session never passes to a queued Lock ([WithLocalHandoff]):
//     its Unlock releases it on the server; a Lock that waited on a session of its own
//     hands off as without the option;
//   - a shared session that once held more than [WithSessionLimits]' retireAfter locks at
//     once is closed, not pooled, when it empties (capacity does not apply: perSession
//     bounds it);
//   - Unlock runs in the session's next batch, bounded by 5 s whatever its ctx, as a
//     [Session]'s Unlock.
//
// When every shared session is full and this Manager's locks and waits pin every pool
// connection, a TryLock returns an error wrapping [ErrPoolExhausted] at once, and a Lock
// (whose lock is free) waits until a shared session has room again (an Unlock on it) or
// a connection frees, whichever comes first, and takes its lock there; its ctx bounds
// that wait, and ends it with an error wrapping ErrPoolExhausted and ctx's error.
//
// perSession must be at least 1. The option cannot be combined with transaction holdings,
// which cannot be released one by one: New refuses it with [ErrInvalidOption] beside
// [WithHolding](HoldingTransaction), before connecting, and behind a transaction pooler
// (it works directly and through a session pooler). [WithWaitSessions] requires it.
func WithSharedSessions(perSession int) Option {
	return option(func(s *settings) error {
		if perSession < 1 {
			return fmt.Errorf("%w: WithSharedSessions(%d): want at least 1 holding per session", ErrInvalidOption, perSession)
		}
		s.sharePer = perSession
		return nil
	})
}

// WithWaitSessions bounds the connections a Manager sharing sessions (WithSharedSessions)
// spends on waits: at most n of its shared Locks wait, and then hold, on sessions of
// their own at once. Another Lock whose key is taken waits without a session: it tries
// the key again on a shared session, after a pause of a quarter of its wait so far (at
// least 2 ms, at most 1 s, varied by up to a half, then put off to the Manager's next
// 8 ms tick, so that its parked Locks try together, in one statement), until it takes
// the key (then on the shared session), or one of the n places frees and it waits on a
// session of its own, in the order the Locks asked; its ctx ends that wait as any other,
// leaving nothing held or waiting. Each of its tries costs a row in a shared session's
// next statement. When a Lock of the same Manager releases the key, the parked Lock
// tries at once, in the next statement. TryLock, Do, DoTx, TryDo, Lead and Semaphores
// are not affected.
//
// The bound on a parked Lock's wait: PostgreSQL refuses a try while another session
// waits for the key, so a parked Lock is never granted before a waiter in the server's
// queue, and a key that is always queued for (handed over from waiter to waiter) is never
// free for a try. A Lock parked for 1 s therefore asks, after each try that is refused
// (they are then 250 ms to 1 s apart), whether a session waits for its key (a read of
// pg_locks on a shared session); if one does, it is given the next place that frees,
// before the Locks parked earlier, and waits in the server's queue on that session. Only
// if no place frees within 1 s more (the places are kept by long holdings) does it wait
// on a session of its own beyond the n places, granted as without this option. While
// others queue for the key, parking thus adds 1 to 2 s to its wait; while nobody
// queues, a parked Lock takes the key at its first try after the release (within a
// quarter of its wait so far, at most 1 s, and a tick). n bounds the sessions of the
// Manager's waits, except those of Locks overtaken by a queue while every place stays
// taken for over a second.
//
// When not to park: on hot keys that many processes want at once and hold briefly, the
// server's queue hands a key over in one round trip, while a parked Lock learns of a
// release by another process only at its next try, and each try costs client and server
// CPU; there parking is no faster than waiting on a session at the same connection
// budget, and its p99 is longer (docs/scale.md has the figures). Where the connections
// allow it, give n as many places as the waits a process has at once, or leave the
// option off; parking pays where most waits are for keys that are merely held. Where the
// budget is fixed and the keys are hot, capping the pool (pool_max_conns) instead of
// parking makes a Lock whose key is taken wait for a connection, in the order the Locks
// were called, and in the server's queue on it, as a plain pool's callers do: in the hot
// fleet of docs/benchmarks.md, at the same 140 connections, 0.95x a plain pool's locks/s
// by the median of 12 rounds (0.74-1.27x) with a p99 in its range (189-270 ms against
// 171-270 ms), where parking, in earlier runs, ran at about 0.8x with a p99 about 2.5x
// its. A TryLock there still takes a free key on a shared session; one that needs a
// connection of its own while every connection is pinned fails at once with
// ErrPoolExhausted, as without sharing.
//
// A wait place is the session's: a Lock that waited on one and hands the lock on
// ([WithLocalHandoff]) hands its place on with it, until the session goes back to the
// pool.
//
// n must be at least 1, and the Manager must share sessions: New refuses the option
// without [WithSharedSessions] with [ErrInvalidOption], before connecting, and so behind
// a transaction pooler, where WithSharedSessions is refused. Without this option every
// waiting Lock has a session of its own. It does not block.
func WithWaitSessions(n int) Option {
	return option(func(s *settings) error {
		if n < 1 {
			return fmt.Errorf("%w: WithWaitSessions(%d): want at least 1 waiting session", ErrInvalidOption, n)
		}
		s.waitSessions = n
		return nil
	})
}

// WithSessionLimits sets the limits of a [Session]: capacity, the most distinct locks it
// may hold (a Lock past it fails with ErrTooManyLocks; the default is 10000), and
// retireAfter: a Session that ever held more locks has its connection closed at Close
// rather than returned to the pool, because a backend pays about 45 ns per statement for
// every lock it ever held, until it exits (the default is 1000). Both must be positive,
// retireAfter at most capacity. The server's own limit is shared by all sessions: its lock
// table holds about max_locks_per_transaction × (max_connections + max_prepared_transactions)
// locks, and past it every session fails (ErrLockTableFull). Under [WithSharedSessions]
// retireAfter retires shared sessions too (capacity does not bound them).
func WithSessionLimits(capacity, retireAfter int) Option {
	return option(func(s *settings) error {
		if capacity < 1 || retireAfter < 1 || retireAfter > capacity {
			return fmt.Errorf("%w: session limits %d, %d: want 1 <= retireAfter <= capacity", ErrInvalidOption, capacity, retireAfter)
		}
		s.sessionCap, s.sessionRetire = capacity, retireAfter
		return nil
	})
}

// WithLocalHandoff lets a lock pass between goroutines of the Manager without leaving
// the server session, bounded so that other processes still get their turn. When a Lock
// is unlocked while another [Manager.Lock] of the same key and form (name or raw key, or
// pair) waits in this Manager's queue, the lock passes to that call: no statement runs,
// and the new holder gets its own Lock (its own Done, Err, Token and work tag) on the
// same connection. A run of handoffs ends, and Unlock releases the lock on the server,
// after max handoffs or once budget has passed since the session took the lock from the
// server, whichever comes first. Meanwhile the Manager's queued calls wait in the
// process, not on the server (pg_locks and [Manager.Holders] do not show them), so a
// waiter in another process that waits on the server gets the lock after at most max
// more holdings by this Manager, none beginning later than budget into the run.
// TryLock, shared locks, Sessions and Semaphores never take part, nor a Lock held on a
// shared session ([WithSharedSessions]; one that waited on a session of its own does, its
// wait place of [WithWaitSessions] going with the session), nor a Lock that published a
// value or announced itself ([Lock.Publish] under [WithLeaderTable], Lead): the value
// must go with its holding, which its release withdraws on the server. Hooks
// ([WithHooks]) see a handoff in LockEvent.Handoff. The default is off;
// max must be from 1 to 1000 and budget from 1µs to 1m (16 and 2ms suit most
// programs). See docs/locking.md, "In-process handoff".
func WithLocalHandoff(max int, budget time.Duration) Option {
	return option(func(s *settings) error {
		if max < 1 || max > 1000 || budget < time.Microsecond || budget > time.Minute {
			return fmt.Errorf("%w: local handoff %d, %v; want 1 to 1000 handoffs and 1µs to 1m",
				ErrInvalidOption, max, budget)
		}
		s.handoffMax, s.handoffBudget = max, budget
		return nil
	})
}
