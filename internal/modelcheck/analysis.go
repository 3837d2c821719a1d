package modelcheck

// What the model knows of a batch before it runs: which calls contend with each other,
// and what an isolated call must find.

// mayWait reports whether the call may wait for a lock.
func (w *world) mayWait(o *op) bool {
	switch o.kind {
	case opLock, opDo, opLead, opSLock, opSLockAll, opDoTx, opBegin, opSBegin, opToken:
		return true
	}
	return false
}

// analyse fills in what the model knows before the batch runs: which calls are
// isolated (no other call of the batch touches their keys, Lock or Session, and no
// backend is terminated or Manager closed), and what isolated calls must find.
func (w *world) analyse(ops []*op) {
	disrupted := false
	for _, o := range ops {
		disrupted = disrupted || o.kind == opTerminate || o.kind == opClose
	}
	for _, o := range ops {
		o.disrupted = disrupted
		o.isolated = !disrupted
		for _, p := range ops {
			if p != o && w.conflict(o, p) {
				o.isolated = false
			}
			if p != o && ((o.sh != nil && p.sh == o.sh && p.kind == opSClose) || (o.lh != nil && p.lh == o.lh)) {
				o.rivalClose = true
			}
		}
		o.free = true
		for _, n := range o.names {
			o.free = o.free && w.compatible(n, o.shared, o.sh)
			if o.sh != nil && o.sh.held[n] > 0 {
				o.preHeld++
				if o.heldBefore == nil {
					o.heldBefore = map[string]bool{}
				}
				o.heldBefore[n] = true
			}
		}
		if o.kind == opSUnlock {
			o.preHeld = o.sh.held[o.names[0]]
		}
		if o.fenced() {
			o.fin.witness = witnessOf(o, ops)
		}
		if !o.isolated && w.mayWait(o) && o.plan.d == 0 && (o.plan.kind == ctxLive || o.plan.kind == ctxCheck) {
			// It may wait for a call of its own batch: bound the wait, to keep steps short.
			o.plan.d = 2 * w.shortWait().d
			if o.plan.kind == ctxLive {
				o.plan.kind = ctxDeadline
			}
		}
	}
}

func (w *world) conflict(a, b *op) bool {
	if (a.lh != nil && a.lh == b.lh) || (a.sh != nil && a.sh == b.sh) {
		return true
	}
	ka, kb := w.touched(a), w.touched(b)
	for k := range ka {
		if kb[k] {
			return true
		}
	}
	return false
}

// touched returns the names a call may lock, unlock or look at.
func (w *world) touched(o *op) map[string]bool {
	out := map[string]bool{}
	for _, n := range o.names {
		out[n] = true
	}
	if o.kind == opSClose {
		for n := range o.sh.held {
			out[n] = true
		}
	}
	return out
}
