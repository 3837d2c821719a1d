package modelcheck

import "time"

// Batches that make shared sessions hold several Locks (Config.Shared): one or two Lock
// or TryLock calls on names nothing holds, on a Manager that shares sessions between its
// holdings (advisory.WithSharedSessions). Such a call takes its lock on a session that
// holds the Manager's other Locks, if it has one; the invariants then check the backend's
// several Locks (each granted in pg_locks, never two claiming one lock, one connection for
// them all), and terminations drawn later end them together.

// sharedBatch returns such a batch, or nil if no shared Manager may pin more now or no
// name is free.
func (w *world) sharedBatch() []*op {
	var slots []*mgrSlot
	for _, s := range w.roomySlots(nil) {
		if w.shared[s.idx] {
			slots = append(slots, s)
		}
	}
	free := w.freeNames()
	if len(slots) == 0 || len(free) == 0 {
		return nil
	}
	s := slots[w.rng.IntN(len(slots))]
	w.rng.Shuffle(len(free), func(i, j int) { free[i], free[j] = free[j], free[i] })
	var ops []*op
	for i, n := range free[:min(len(free), 1+w.rng.IntN(2))] {
		o := &op{kind: opLock, admin: w.admin, slot: s.String(), m: s.m, app: s.app, names: []string{n}}
		if w.rng.IntN(2) == 0 {
			o.kind = opTryLock
		}
		o.shared = w.rng.IntN(4) == 0
		w.completeOneName(o)
		o.idx, o.step = i, w.step
		ops = append(ops, o)
	}
	w.analyse(ops)
	return ops
}

// parkBatch returns two or three Lock calls on a Parked slot's Manager for names that
// exclusive Locks of other Managers hold (two LockShared if they hold one), and the
// Unlock of one of those holdings a few ms later: past the Manager's one place to wait on
// a session, the Locks wait without one, trying on a shared session, and the released
// name goes to a call waiting either way. nil if no such slot may pin more now, or other
// Managers hold no exclusive Lock.
func (w *world) parkBatch() []*op {
	var s *mgrSlot
	for _, c := range w.roomySlots(nil) {
		if w.parked[c.idx] {
			s = c
		}
	}
	if s == nil {
		return nil
	}
	var held []*lockH
	seen := map[string]bool{}
	for _, h := range w.liveLocks() {
		if h.m != s.m && !h.shared && !seen[h.name] {
			seen[h.name] = true
			held = append(held, h)
		}
	}
	if len(held) == 0 {
		return nil
	}
	w.rng.Shuffle(len(held), func(i, j int) { held[i], held[j] = held[j], held[i] })
	held = held[:min(len(held), 2+w.rng.IntN(2))]
	var ops []*op
	for _, h := range held {
		o := &op{kind: opLock, admin: w.admin, slot: s.String(), m: s.m, app: s.app, names: []string{h.name},
			shared: w.rng.IntN(4) == 0}
		ops = append(ops, o)
	}
	if len(held) == 1 { // shared Locks of one name are not queued in the process: each waits
		ops[0].shared = true
		ops = append(ops, &op{kind: opLock, admin: w.admin, slot: s.String(), m: s.m, app: s.app,
			names: []string{held[0].name}, shared: true})
	}
	h := held[w.rng.IntN(len(held))]
	ops = append(ops, &op{kind: opUnlock, admin: w.admin, lh: h, pre: h.state, names: []string{h.name},
		app: h.app, after: time.Duration(2+w.rng.IntN(20)) * time.Millisecond})
	for i, o := range ops {
		w.completeOneName(o)
		if o.kind == opLock && w.rng.IntN(2) == 0 {
			o.plan = ctxPlan{kind: ctxDeadline, d: time.Duration(50+w.rng.IntN(400)) * time.Millisecond}
		}
		o.idx, o.step = i, w.step
	}
	w.analyse(ops)
	return ops
}

// completeOneName completes a call about one name that a batch of its own made (see
// handoffBatch, sharedBatch, parkBatch): its fn, the name in full, its key, its ctx plan.
func (w *world) completeOneName(o *op) {
	w.genFn(o)
	o.full = w.fulls(o.names)
	o.keys = append(o.keys, w.key(o.names[0]))
	o.plan = w.genPlan(o)
}
