package advisory

import (
	"context"
	"errors"
	"time"
)

// Hooks are functions a Manager calls on lock events, for metrics and tracing: see
// [WithHooks], and contrib/otel for an OpenTelemetry adapter. Each is optional; one left
// nil costs a nil check. They are called synchronously on the goroutine where the event
// happens (the caller's, or the loss watcher's), possibly from many goroutines at once:
// they must be safe for concurrent use, return quickly, and not call the Manager. A panic
// in a hook is recovered and reported on the logger at Error, never re-raised (on the
// loss watcher's goroutine it would kill the process; on a caller's it would lose a held
// lock's *Lock): the call it reports returns as it would have, the lock is held or given
// back as it would have been, Done closes and Close returns.
//
// Locks taken with Manager calls (Lock, TryLock and their Shared and Key forms, Do, DoTx,
// Lead) are reported; a Session's locks are not, one by one. A [Semaphore]'s Acquire and
// TryAcquire calls are reported once each, as Lock and TryLock calls: Acquired with the
// slot's name and key, NotAcquired with the semaphore's name and its turnstile key; the
// slot's Lock then ends like any other. The locks a Semaphore takes on its own behalf
// (the turnstile, tries of slots found held, waits that time out) are not reported.
type Hooks struct {
	// Acquired is called when a Lock or TryLock call returns a held lock.
	Acquired func(LockEvent)
	// NotAcquired is called when a Lock or TryLock call returns an error; the event's
	// Reason says why.
	NotAcquired func(LockEvent)
	// Ended is called when a held lock ends: released (Unlock, Close of a Do) or lost.
	Ended func(LockEvent)
	// LeadRetry is called when a campaign of [Manager.Lead] or LeadAs fails with an error
	// it does not return for, before it backs off and campaigns again: Reason is the step
	// that failed ("lock", "drain" or "publish"), Err its error, Wait the back-off. (The
	// lock, if it was taken, was released first: Ended reported that. A lost lock, after
	// which Lead campaigns again at once, is reported by Ended alone.)
	LeadRetry func(LockEvent)
}

// A LockEvent describes one lock event for [Hooks].
type LockEvent struct {
	Name   string // the lock's name (with the Manager's namespace), "" for a raw key
	Key    Key
	Shared bool
	Try    bool // a TryLock call (Acquired, NotAcquired)
	// Wait is how long the call took, from its start to its return (Acquired,
	// NotAcquired): for Lock, the time spent waiting for the lock.
	Wait time.Duration
	// Held is how long the lock was held (Ended).
	Held time.Duration
	// Reason is why a call failed (NotAcquired): "locked" (held elsewhere, TryLock),
	// "canceled" (ctx ended), "pool_exhausted", "pooler", "standby", "closed" or "error";
	// or why a lock ended (Ended): "released", or for a loss "terminated", "server_closed",
	// "keepalive", "reset", "timeout" (an idle or transaction timeout of the server or a
	// pooler; the error names the setting), "work_ended_tx" (fenced work ended the
	// holding's transaction through tx.Conn()), "manager_closed" or "connection_failed".
	Reason string
	// Err is the error returned (NotAcquired) or the loss (Ended); nil otherwise.
	Err error
	// Handoff reports that the lock passed between two Lock calls of this Manager without
	// leaving the server session (see [WithLocalHandoff]): on Acquired, the lock came from
	// a holder of this Manager; on Ended (Reason "released"), it went to one.
	Handoff bool
}

// Lost reports whether an Ended event is a loss.
func (e LockEvent) Lost() bool { return e.Reason != "released" && e.Err != nil }

func (p *pin) event(wait, held time.Duration, reason string, err error) LockEvent {
	return LockEvent{Name: p.name, Key: p.key, Shared: p.shared, Wait: wait, Held: held, Reason: reason, Err: err}
}

// failReason classifies a failed Lock or TryLock call for NotAcquired.
func failReason(ctx context.Context, err error) string {
	var locked *LockedError
	switch {
	case errors.As(err, &locked), errors.Is(err, ErrLocked):
		return "locked"
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return "canceled"
	case errors.Is(err, ErrPoolExhausted):
		return "pool_exhausted"
	case errors.Is(err, ErrPooler):
		return "pooler"
	case errors.Is(err, ErrStandby):
		return "standby"
	case errors.Is(err, ErrClosed):
		return "closed"
	}
	return "error"
}

// endReason classifies how a held lock ended, for Ended.
func endReason(err error) string {
	switch {
	case !errors.Is(err, ErrLockLost):
		return "released"
	case errors.Is(err, ErrClosed):
		return "manager_closed"
	}
	if lost := (*lostError)(nil); errors.As(err, &lost) {
		return lost.code // classified where the loss was seen
	}
	code, _ := lossCause(err)
	return code
}

// fireAcquired calls the Acquired hook, if any, with ev: every route that hands a call
// its lock (own session, handoff, shared session, a Semaphore's slot) reports it here.
func (m *Manager) fireAcquired(ev LockEvent) {
	if h := m.set.hooks.Acquired; h != nil {
		callUser(m.set.logger, "hook Acquired", func() { h(ev) })
	}
}

// fireEnded calls the Ended hook, if any, with ev: every kind of holding (own pin,
// shared session) reports its end here.
func (m *Manager) fireEnded(ev LockEvent) {
	if h := m.set.hooks.Ended; h != nil {
		callUser(m.set.logger, "hook Ended", func() { h(ev) })
	}
}
