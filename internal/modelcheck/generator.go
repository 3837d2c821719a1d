package modelcheck

import (
	"time"
)

// Random batches of calls for the model. All randomness is drawn here, from the seeded
// generator, on the test's goroutine.

// weights of the calls, when possible.
var opWeights = map[opKind]int{
	opLock: 12, opTryLock: 10, opUnlock: 12, opSession: 4,
	opSLock: 8, opSTryLock: 6, opSLockAll: 4, opSTryLockAll: 4, opSUnlock: 8, opSClose: 3,
	opDo: 5, opLead: 5, opHolders: 2, opTerminate: 3, opClose: 1,
	opBegin: 7, opSBegin: 3, opDoTx: 4, opToken: 4, opCheckToken: 2,
}

// genBatch returns 1 to 3 calls to run at once. Later calls are often about the same
// name, Session or Lock as the first, so that they contend.
func (w *world) genBatch() []*op {
	if w.handoffs && w.rng.IntN(3) == 0 {
		if ops := w.handoffBatch(); ops != nil {
			return ops
		}
	}
	if len(w.parked) > 0 && w.rng.IntN(3) == 0 {
		if ops := w.parkBatch(); ops != nil {
			return ops
		}
	}
	if len(w.shared) > 0 && w.rng.IntN(4) == 0 {
		if ops := w.sharedBatch(); ops != nil {
			return ops
		}
	}
	if w.rng.IntN(8) == 0 {
		if ops := w.nestedBatch(); ops != nil {
			return ops
		}
	}
	n := 1
	switch r := w.rng.IntN(10); {
	case r >= 8:
		n = 3
	case r >= 5:
		n = 2
	}
	var ops []*op
	for len(ops) < n {
		var focus *op
		if len(ops) > 0 && w.rng.IntN(10) < 6 {
			focus = ops[0]
		}
		o := w.genOp(focus, ops)
		o.idx, o.step = len(ops), w.step
		if len(ops) > 0 && o.kind != opTerminate {
			o.after = time.Duration(w.rng.IntN(15)) * time.Millisecond
		}
		ops = append(ops, o)
	}
	w.analyse(ops)
	return ops
}

func (w *world) genOp(focus *op, batch []*op) *op {
	kind := w.pickKind(batch)
	if focus != nil && focus.fenced() && w.rng.IntN(2) == 0 && w.possible(opTerminate, batch) {
		kind = opTerminate // so that terminations land during fn
	}
	o := &op{kind: kind, admin: w.admin}
	switch kind {
	case opLock, opTryLock, opDo, opLead, opHolders, opSession, opDoTx:
		w.genManagerCall(o, focus, batch)
	case opUnlock, opBegin, opToken:
		o.lh = w.pickLock(focus)
		if o.kind != opUnlock && o.lh.state != hLive && w.rng.IntN(2) == 0 {
			o.lh = w.pickLock(focus) // ended Locks less often: their calls fail at once
		}
		o.pre, o.names, o.app = o.lh.state, []string{o.lh.name}, o.lh.app
		w.genFn(o)
	case opCheckToken:
		w.genCheckToken(o, focus)
	case opTerminate:
		o.pick, o.after, o.apps = w.rng.Float64(), time.Duration(w.rng.IntN(40))*time.Millisecond, w.apps()
		o.fin.prefer = preferVictim(focus)
	case opClose:
		s := w.slots[w.rng.IntN(len(w.slots))]
		o.slot, o.m, o.app, o.dsn, o.opts = s.String(), s.m, s.app, s.dsn, s.opts
	default:
		w.genSessionCall(o, focus)
	}
	o.full = w.fulls(o.names)
	for _, n := range o.names {
		o.keys = append(o.keys, w.key(n))
	}
	o.plan = w.genPlan(o)
	return o
}

// pickKind draws a call kind among those possible now.
func (w *world) pickKind(batch []*op) opKind {
	var kinds []opKind
	total := 0
	for k := opLock; k < opKinds; k++ {
		if w.possible(k, batch) {
			kinds = append(kinds, k)
			total += opWeights[k]
		}
	}
	r := w.rng.IntN(total)
	for _, k := range kinds {
		if r -= opWeights[k]; r < 0 {
			return k
		}
	}
	panic("unreachable")
}

func (w *world) possible(k opKind, batch []*op) bool {
	switch k {
	case opUnlock, opBegin, opToken:
		return len(w.locks) > 0
	case opSLock, opSTryLock, opSLockAll, opSTryLockAll, opSUnlock, opSClose, opSBegin:
		return len(w.sessions) > 0
	case opTerminate, opClose:
		for _, o := range batch {
			if o.kind == k {
				return false
			}
		}
	case opLock, opTryLock, opDo, opLead, opSession, opDoTx:
		return len(w.roomySlots(batch)) > 0
	}
	return true
}

// roomySlots returns the Managers that may pin one more connection.
func (w *world) roomySlots(batch []*op) (out []*mgrSlot) {
	for _, s := range w.slots {
		n := w.handles(s.m)
		for _, o := range batch {
			if o.m == s.m {
				n++
			}
		}
		if n < maxHandles {
			out = append(out, s)
		}
	}
	return out
}

func (w *world) genManagerCall(o *op, focus *op, batch []*op) {
	slots := w.roomySlots(batch)
	if o.kind == opHolders {
		slots = w.slots
	}
	s := slots[w.rng.IntN(len(slots))]
	if f := focusSlot(focus, slots); f != nil && o.kind != opHolders && w.rng.IntN(2) == 0 {
		s = f // several calls of one Manager on one name: its in-process queue and handoffs
	}
	o.slot, o.m, o.app = s.String(), s.m, s.app
	if o.kind == opSession {
		return
	}
	o.names = []string{w.pickName(focus)}
	o.shared = (o.kind == opLock || o.kind == opTryLock) && w.rng.IntN(3) == 0
	// An exclusive Lock or TryLock is made by key (LockKey of the name's key: the same
	// lock, without the name's statement text) one time in three.
	o.byKey = (o.kind == opLock || o.kind == opTryLock) && !o.shared && w.rng.IntN(3) == 0
	if o.kind == opDo || o.kind == opLead {
		o.fn = fnKind(w.pickWeighted([]int{30, 25, 20, 25}))
		o.fnWait = time.Duration(w.rng.IntN(80)) * time.Millisecond
	}
	if o.kind == opDo {
		o.nest = w.genNest(o)
	}
	w.genFn(o)
}

// focusSlot returns the Manager of the focus call (or of the Lock it is about), if it is
// among slots.
func focusSlot(focus *op, slots []*mgrSlot) *mgrSlot {
	if focus == nil {
		return nil
	}
	m := focus.m
	if focus.lh != nil {
		m = focus.lh.m
	}
	for _, s := range slots {
		if s.m == m {
			return s
		}
	}
	return nil
}

func (w *world) genSessionCall(o *op, focus *op) {
	o.sh = w.pickSession(focus)
	o.pre, o.app = o.sh.state, o.sh.app
	switch o.kind {
	case opSLockAll, opSTryLockAll:
		o.names = w.pickNames(focus, 1+w.rng.IntN(3))
	case opSUnlock:
		if held := o.sh.heldNames(); len(held) > 0 && w.rng.IntN(4) > 0 {
			o.names = []string{held[w.rng.IntN(len(held))]}
		} else {
			o.names = []string{w.pickName(focus)}
		}
	case opSClose:
	case opSBegin:
		o.names = o.sh.heldNames() // the locks that fence its transaction
		w.genFn(o)
	default:
		o.names = []string{w.pickName(focus)}
	}
}

func (w *world) pickWeighted(weights []int) int {
	total := 0
	for _, x := range weights {
		total += x
	}
	r := w.rng.IntN(total)
	for i, x := range weights {
		if r -= x; r < 0 {
			return i
		}
	}
	return len(weights) - 1
}

// pickName prefers the focus call's name.
func (w *world) pickName(focus *op) string {
	if focus != nil && len(focus.names) > 0 && w.rng.IntN(10) < 7 {
		return focus.names[w.rng.IntN(len(focus.names))]
	}
	return w.names[w.rng.IntN(len(w.names))]
}

func (w *world) pickNames(focus *op, n int) []string {
	seen := map[string]bool{}
	var out []string
	for len(out) < n {
		name := w.pickName(focus)
		if !seen[name] {
			seen[name] = true
			out = append(out, name)
		}
		focus = nil
	}
	return out
}

// pickLock prefers live Locks, and those on the focus call's name.
func (w *world) pickLock(focus *op) *lockH {
	var live, onFocus, ended []*lockH
	for _, h := range w.locks {
		switch {
		case h.state != hLive:
			ended = append(ended, h)
		case focus != nil && len(focus.names) > 0 && h.name == focus.names[0]:
			onFocus = append(onFocus, h)
			if h.m == focus.m { // the focus call's own Manager's Lock: a handoff to it
				onFocus = append(onFocus, h, h)
			}
			fallthrough
		default:
			live = append(live, h)
		}
	}
	switch {
	case len(onFocus) > 0 && w.rng.IntN(10) < 7:
		return onFocus[w.rng.IntN(len(onFocus))]
	case len(live) > 0 && (len(ended) == 0 || w.rng.IntN(10) < 8):
		return live[w.rng.IntN(len(live))]
	}
	return ended[w.rng.IntN(len(ended))]
}

// pickSession prefers the focus call's Session, and live ones.
func (w *world) pickSession(focus *op) *sessH {
	if focus != nil && focus.sh != nil && w.rng.IntN(10) < 8 {
		return focus.sh
	}
	live := w.liveSessions()
	if len(live) > 0 && w.rng.IntN(10) < 9 {
		return live[w.rng.IntN(len(live))]
	}
	return w.sessions[w.rng.IntN(len(w.sessions))]
}
