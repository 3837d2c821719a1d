package modelcheck

import (
	"errors"
	"time"

	"github.com/pgadvisory/advisory"
)

// Judging a Do's nested call (nested.go): a call of the Do's Manager re-enters the
// holding at once (a re-entered Lock on the holding's backend, whose Unlock releases
// nothing; a nested fn run once, under it), another Manager's is refused with
// ErrNotReentrant, and after either the holding is still the outer backend's. A nested
// call fails only with its ctx's error, when that ctx ended for a reason of its own (its
// plan, the outer ctx, a loss), with the loss when one is explained, or with ErrClosed
// when its Manager was closed: never by waiting for itself until its ctx runs out.

func (v *verdict) nested() {
	n := v.o.nest
	if n == nil || !n.res.ran {
		return
	}
	r := &n.res
	v.w.countNested(n)
	if r.ctxEnded && r.end.Sub(r.ctxEnd) > lateBound {
		v.fail("nested %v returned %v after its ctx ended", n, r.end.Sub(r.ctxEnd).Round(time.Millisecond))
	}
	if took := r.took(); !v.lossOK && took > lateBound {
		v.fail("nested %v took %v to return or run fn (%v): a re-entry, or its refusal, must not wait",
			n, took.Round(time.Millisecond), r.err)
	}
	if !v.lossOK && r.heldErr == nil && r.heldAfter != r.outerPID {
		v.fail("after nested %v (%v), pg_locks shows pid %d holding the name exclusively, not the holding's %d",
			n, r.err, r.heldAfter, r.outerPID)
	}
	if n.nestedPanicked() {
		return // judged with the Do: the panic must go through it
	}
	switch n.kind {
	case nestDo, nestTryDo:
		v.nestedFnCall()
	case nestForeign:
		if r.err != nil && !errors.Is(r.err, advisory.ErrNotReentrant) && !v.nestedErrOK() {
			v.fail("nested %v: got %v, want ErrNotReentrant", n, r.err)
		}
		if r.err == nil && !v.lossOK {
			v.fail("nested %v took the lock its Do holds", n)
		}
	default:
		v.nestedLock()
	}
}

// nestedErrOK reports whether the nested call's error is one it may fail with: its ctx's
// (when that ended for a reason of its own), an explained loss, or its Manager's Close.
func (v *verdict) nestedErrOK() bool {
	n, r, o := v.o.nest, &v.o.nest.res, v.o
	switch {
	case v.lossOK && (errors.Is(r.err, advisory.ErrLockLost) || errors.Is(r.err, advisory.ErrClosed)):
		return true
	case r.ctxErr == nil || !errors.Is(r.err, r.ctxErr):
		return false
	}
	// A ctx that was fn's own ends with the outer call's, or a loss. (When exactly the
	// outer ctx ended is recorded by an AfterFunc, which may run after the nested call has
	// returned: that it ended is enough here; that the call did not wait for it is
	// checked by took.)
	return n.plan.kind != ctxLive || o.res.ctxEnded || v.lossOK
}

// nestedLock judges a nested Lock, TryLockKey, LockShared, or the Lock left open.
func (v *verdict) nestedLock() {
	n, r := v.o.nest, &v.o.nest.res
	switch {
	case r.err != nil:
		if !v.nestedErrOK() {
			v.fail("nested %v: unexpected error: %v", n, r.err)
		}
	case n.plan.kind == ctxDone:
		v.fail("nested %v succeeded with an already-done ctx", n)
	case r.lock == nil:
		v.fail("nested %v returned a nil Lock and a nil error", n)
	default:
		v.reenteredLock(r.lock)
		if n.kind != nestLeak && r.unlockErr != nil && !(v.lossOK && errors.Is(r.unlockErr, advisory.ErrLockLost)) {
			v.fail("nested %v: the re-entered Lock's Unlock returned %v", n, r.unlockErr)
		}
	}
	if n.kind == nestLeak && r.lock != nil {
		lost := v.lossOK && errors.Is(r.leakErr, advisory.ErrLockLost)
		if !r.leakDone || !(errors.Is(r.leakErr, advisory.ErrNotHeld) || lost) {
			v.fail("the Lock nested %v left open: after Do returned, Done closed %v, Err %v; want closed, ErrNotHeld",
				n, r.leakDone, r.leakErr)
		}
	}
}

// reenteredLock judges the Lock of a re-entry.
func (v *verdict) reenteredLock(l *advisory.Lock) {
	n, r := v.o.nest, &v.o.nest.res
	if l == nil || !l.Reentered() || l.PID() != r.outerPID || l.Shared() {
		v.fail("nested %v: want a re-entered, exclusive Lock on pid %d; got %v", n, r.outerPID, describeLock(l))
	}
}

func describeLock(l *advisory.Lock) any {
	if l == nil {
		return nil
	}
	return struct {
		Reentered, Shared bool
		PID               uint32
	}{l.Reentered(), l.Shared(), l.PID()}
}

// nestedFnCall judges a nested Do or TryDo.
func (v *verdict) nestedFnCall() {
	n, r := v.o.nest, &v.o.nest.res
	if n.plan.kind == ctxDone && r.fnCalls > 0 {
		v.fail("nested %v ran fn although its ctx was done before the call", n)
	}
	for _, b := range r.fnBad {
		if !v.lossOK {
			v.fail("%s", b)
		}
	}
	switch {
	case r.fnCalls > 1:
		v.fail("nested %v ran fn %d times", n, r.fnCalls)
	case r.fnCalls == 0 && r.err == nil:
		v.fail("nested %v returned nil without running fn (ran %v)", n, r.tryRan)
	case r.fnCalls == 0:
		if !v.nestedErrOK() {
			v.fail("nested %v never ran fn; unexpected error: %v", n, r.err)
		}
	default:
		v.reenteredLock(r.lock)
		if n.kind == nestTryDo && !r.tryRan {
			v.fail("nested %v ran fn but reports ran == false", n)
		}
		v.nestedFnResult()
	}
}

// nestedFnResult: a nested Do or TryDo returns fn's error, or the loss, or its ctx's
// error where fn waited for it.
func (v *verdict) nestedFnResult() {
	n, r := v.o.nest, &v.o.nest.res
	ok := false
	switch n.fn {
	case fnErr:
		ok = errors.Is(r.err, errModelFn)
	case fnNil:
		ok = r.err == nil || (v.lossOK && errors.Is(r.err, advisory.ErrLockLost))
	case fnWait:
		ok = r.err == nil || v.nestedErrOK()
	}
	if !ok {
		v.fail("nested %v: fn returned %s; got %v", n, [...]string{"nil", "errModelFn", "", "nil or ctx.Err()"}[n.fn], r.err)
	}
}

// countNested adds the nested call's outcome to the statistics, as "Do>Lock" and so on.
func (w *world) countNested(n *nestCall) {
	key := "Do>" + nestNames[n.kind]
	if w.outcomes[key] == nil {
		w.outcomes[key] = map[string]int{}
	}
	class := errClass(n.res.err)
	if errors.Is(n.res.err, advisory.ErrLockLost) { // a lost holding's nested fn also ends by its ctx
		class = "lost"
	}
	w.outcomes[key][class]++
}
