package modelcheck

import (
	"time"
)

// Batches that make in-process handoffs (Config.Handoffs): a Lock call on the name of a
// live exclusive Lock, on that Lock's Manager, then that Lock's Unlock a few milliseconds
// later, when the Lock call waits in the Manager's queue, and sometimes a termination of
// the Lock's backend around the pass. With WithLocalHandoff the
// Unlock passes the lock to the call; the judge and the invariants then check the pass
// as any other outcome (one live handle per backend, Done and Err of both Locks, every
// live Lock granted in pg_locks to its backend, the pool's connections).

// handoffBatch returns such a batch, or nil if no live Lock allows one now.
func (w *world) handoffBatch() []*op {
	var cands []*lockH
	for _, h := range w.liveLocks() {
		if !h.shared && w.slotOf(h) != nil {
			cands = append(cands, h)
			if h.pending() { // a transaction holding with writes pending: it must not pass on
				cands = append(cands, h, h)
			}
		}
	}
	if len(cands) == 0 {
		return nil
	}
	h := cands[w.rng.IntN(len(cands))]
	s := w.slotOf(h)
	lock := &op{kind: opLock, admin: w.admin, slot: s.String(), m: s.m, app: s.app,
		names: []string{h.name}}
	unlock := &op{kind: opUnlock, admin: w.admin, lh: h, pre: h.state, names: []string{h.name},
		app: h.app, after: time.Duration(2+w.rng.IntN(8)) * time.Millisecond}
	ops := []*op{lock, unlock}
	for _, o := range ops {
		w.completeOneName(o)
	}
	if w.rng.IntN(2) == 0 { // else its ctx may end around the pass: the call must then hold nothing
		lock.plan = ctxPlan{kind: ctxDeadline, d: 300 * time.Millisecond}
	}
	if w.rng.IntN(3) == 0 { // the backend the lock passes on is terminated before, during or after
		kill := &op{kind: opTerminate, admin: w.admin, pick: w.rng.Float64(),
			after: time.Duration(w.rng.IntN(20)) * time.Millisecond, apps: w.apps()}
		kill.fin.prefer = h.pid
		kill.plan = w.genPlan(kill)
		ops = append(ops, kill)
	}
	for i, o := range ops {
		o.idx, o.step = i, w.step
	}
	w.analyse(ops)
	return ops
}

// slotOf returns h's Manager's slot if that Manager may pin one more connection (the
// Lock call's, until the handoff).
func (w *world) slotOf(h *lockH) *mgrSlot {
	for _, s := range w.roomySlots(nil) {
		if s.m == h.m {
			return s
		}
	}
	return nil
}
