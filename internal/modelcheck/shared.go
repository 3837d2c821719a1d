package modelcheck

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
		o.full = w.fulls(o.names)
		o.keys = append(o.keys, w.key(n))
		w.genFn(o)
		o.plan = w.genPlan(o)
		o.idx, o.step = i, w.step
		ops = append(ops, o)
	}
	w.analyse(ops)
	return ops
}
