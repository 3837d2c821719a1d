package modelcheck

import (
	"errors"
	"slices"

	"github.com/pgadvisory/advisory"
)

// Judging the calls on a Session.

func (v *verdict) sessionLock() {
	o, r, h := v.o, &v.o.res, v.o.sh
	if o.pre != hLive {
		v.endedTarget()
		return
	}
	try := o.kind == opSTryLock || o.kind == opSTryLockAll
	switch {
	case o.plan.kind == ctxDone && r.err == nil && v.countUp():
		// Unsure whether a done ctx must refuse a count-up; both are accepted.
	case v.doneCtx():
		return
	case r.err == nil:
		if o.isolated && !o.free {
			v.fail("succeeded while the model has other holders of %v", o.names)
		}
	case o.isCtx(r.err):
		if o.isolated && o.free && o.plan.kind == ctxLive && o.preHeld < len(o.names) {
			v.fail("its ctx ran out (%v) although nothing else held %v: %v", liveBound, o.names, r.err)
		}
		return
	case try && errors.Is(r.err, advisory.ErrLocked):
		if o.isolated && o.free {
			v.fail("ErrLocked although nothing else held %v: %v", o.names, r.err)
		}
		return
	case !try && !o.isolated && isDeadlock(r.err):
		return // two Sessions of the batch waited for each other; the server broke the cycle
	case o.rivalClose && errors.Is(r.err, advisory.ErrNotHeld):
		return
	case v.lossOK && errors.Is(r.err, advisory.ErrLockLost), v.closed && errors.Is(r.err, advisory.ErrClosed):
		return
	default:
		v.fail("unexpected error: %v", r.err)
		return
	}
	for _, n := range o.names {
		h.held[n]++
	}
}

// countUp reports whether the Session held every name of the call before it ran, or
// may have: a lock call of the batch on the same Session took the rest.
func (v *verdict) countUp() bool {
	o := v.o
	for _, n := range o.names {
		if o.heldBefore[n] {
			continue
		}
		if !slices.ContainsFunc(v.w.batch, func(p *op) bool {
			return p != o && p.sh == o.sh && p.res.err == nil && slices.Contains(p.names, n) && judgeOrder(p.kind) == 0
		}) {
			return false
		}
	}
	return true
}

func (v *verdict) sessionUnlock() {
	o, r, h := v.o, &v.o.res, v.o.sh
	if o.pre != hLive {
		v.endedTarget()
		return
	}
	name := o.names[0]
	switch {
	case o.plan.kind == ctxDone && o.preHeld == 0 && errors.Is(r.err, advisory.ErrNotHeld):
	case v.doneCtx():
	case v.txSessionUnlock():
		// A transaction holding's rules, judged there; a count-down falls through below.
	case r.err == nil:
		if h.held[name] == 0 {
			v.fail("returned nil, but the Session did not hold %s", name)
			return
		}
		if h.held[name]--; h.held[name] == 0 {
			delete(h.held, name)
		}
	case errors.Is(r.err, advisory.ErrNotHeld):
		if o.isolated && o.preHeld > 0 {
			v.fail("ErrNotHeld, but the Session held %s %d times: %v", name, o.preHeld, r.err)
		}
	case o.isCtx(r.err):
	case v.lossOK && errors.Is(r.err, advisory.ErrLockLost), v.closed && errors.Is(r.err, advisory.ErrClosed):
	default:
		v.fail("unexpected error: %v", r.err)
	}
}

func (v *verdict) sessionClose() {
	o, r, h := v.o, &v.o.res, v.o.sh
	defer func() { h.closed = true }()
	if o.pre != hLive {
		v.endedTarget()
		return
	}
	switch {
	case r.err == nil, o.isCtx(r.err):
	case o.rivalClose && errors.Is(r.err, advisory.ErrNotHeld):
	case v.lossOK && errors.Is(r.err, advisory.ErrLockLost), v.releasedAnyway(&h.txHolding):
	default:
		v.fail("unexpected error: %v", r.err)
	}
	ended, endErr := isClosed(h.S.Done()), h.S.Err()
	defer v.endTx(&h.txHolding, ended, h.pid, h.m)
	switch {
	case !ended && r.err == nil:
		v.fail("returned nil, but Done is not closed")
	case !ended:
	case errors.Is(endErr, advisory.ErrNotHeld):
		h.state = hReleased
	case v.lossOK && errors.Is(endErr, advisory.ErrLockLost):
		h.state = hLost
	default:
		v.fail("after Close, Err is %v", endErr)
		h.state = hLost
	}
	if ended && h.S.Held() != 0 {
		v.fail("after Close, Held is %d", h.S.Held())
	}
}
