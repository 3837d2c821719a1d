package modelcheck

import (
	"errors"
	"fmt"

	"github.com/pgadvisory/advisory"
)

// Judging Do, Lead and Manager.Close, and reconciling the model with the handles' own
// view (Done, Err) after a batch.

func (v *verdict) fnCall() {
	o, r := v.o, &v.o.res
	if o.plan.kind == ctxDone && r.fnCalls > 0 {
		v.fail("fn ran although ctx was done before the call")
	}
	if v.doneCtx() {
		return
	}
	for _, b := range r.fnBad {
		if !v.lossOK {
			v.fail("%s", b)
		}
	}
	if r.fnCalls == 0 {
		v.fnNeverRan()
		return
	}
	if r.fnCalls > 1 && (o.kind == opDo || !v.lossOK) {
		v.fail("fn ran %d times without a loss", r.fnCalls)
	}
	v.nested()
	if o.nest.nestedPanicked() {
		if p, ok := r.panicked.(modelPanic); !ok || !p.nested {
			v.fail("the nested fn panicked, but Do returned %v (panic value %v) instead of letting the panic through", r.err, r.panicked)
		}
		return
	}
	if o.fn == fnPanic {
		if _, ok := r.panicked.(modelPanic); !ok {
			v.fail("fn panicked, but %s returned %v (panic value %v) instead of letting the panic through", o.kind, r.err, r.panicked)
		}
		return
	}
	if !v.fnResultOK() {
		v.fail("fn returned %s; got %v", [...]string{"nil", "errModelFn", "", "nil or ctx.Err()"}[o.fn], r.err)
	}
}

func (v *verdict) fnNeverRan() {
	o, r := v.o, &v.o.res
	switch {
	case r.panicked != nil:
	case r.err == nil:
		v.fail("returned nil without running fn")
	case o.isCtx(r.err):
		if o.isolated && o.free && o.plan.kind == ctxLive {
			v.fail("fn never ran although nothing held %s: %v", o.names[0], r.err)
		}
	case v.closed && errors.Is(r.err, advisory.ErrClosed):
	case v.lossOK && errors.Is(r.err, advisory.ErrLockLost):
		// Lost before fn could run: the session ended during the drain that precedes fn.
	default:
		v.fail("fn never ran; unexpected error: %v", r.err)
	}
}

// fnResultOK: Do returns fn's error, or the loss; Lead returns fn's error while leader,
// or ctx's error once ctx ended.
func (v *verdict) fnResultOK() bool {
	o, err := v.o, v.o.res.err
	lost := v.lossOK && (errors.Is(err, advisory.ErrLockLost) || errors.Is(err, advisory.ErrClosed))
	switch {
	case o.kind == opDo && o.fn == fnErr:
		return errors.Is(err, errModelFn)
	case o.kind == opDo && o.fn == fnNil:
		return err == nil || lost
	case o.kind == opDo:
		return err == nil || o.isCtx(err) || lost
	case o.fn == fnErr:
		return errors.Is(err, errModelFn) || o.isCtx(err) || lost
	}
	return err == nil || o.isCtx(err) || lost
}

// close judges Manager.Close: the calls after it returned ErrClosed, and every Lock and
// Session of the Manager ended, as lost, by the time Close returned.
func (v *verdict) close() {
	o, r, w := v.o, &v.o.res, v.w
	for _, b := range r.bad {
		v.fail("%s", b)
	}
	if r.err != nil {
		v.fail("New after Close: %v", r.err)
		return
	}
	for _, h := range w.liveLocks() {
		if h.m != o.m {
			continue
		}
		if !isClosed(h.l.Done()) || !errors.Is(h.l.Err(), advisory.ErrLockLost) {
			v.fail("%v: after its Manager's Close returned, Done closed %v, Err %v; want closed, ErrLockLost",
				h, isClosed(h.l.Done()), h.l.Err())
		}
		h.state = hLost
		h.ended(txRolledBack, fmt.Sprintf("its Manager's Close (step %d call %d)", o.step, o.idx))
	}
	for _, h := range w.liveSessions() {
		if h.m != o.m {
			continue
		}
		if !isClosed(h.S.Done()) || !errors.Is(h.S.Err(), advisory.ErrLockLost) || h.S.Held() != 0 {
			v.fail("%v: after its Manager's Close returned, Done closed %v, Err %v, Held %d; want closed, ErrLockLost, 0",
				h, isClosed(h.S.Done()), h.S.Err(), h.S.Held())
		}
		h.state = hLost
		h.ended(txRolledBack, fmt.Sprintf("its Manager's Close (step %d call %d)", o.step, o.idx))
	}
	for _, s := range w.slots {
		if s.m == o.m {
			s.m, s.gen = r.newMgr, s.gen+1
		}
	}
}

// reconcile compares the model with each live handle's own view after a batch. A handle
// whose backend was terminated must be told (Done, Err wrapping ErrLockLost) within
// settleBound; any other handle must still be live.
func (w *world) reconcile(terminated map[uint32]bool) []string {
	var bad []string
	for _, h := range w.liveLocks() {
		switch err := h.l.Err(); {
		case terminated[h.pid]:
			if !waitClosed(h.l.Done(), settleBound) || !errors.Is(h.l.Err(), advisory.ErrLockLost) {
				bad = append(bad, fmt.Sprintf("%v: its backend was terminated; %v later Err is %v, want ErrLockLost", h, settleBound, h.l.Err()))
			}
			h.state = hLost
		case err != nil && w.dead[h.pid] && errors.Is(err, advisory.ErrLockLost):
			h.state = hLost // taken on a connection terminated earlier while it was idle in the pool
		case err != nil:
			bad = append(bad, fmt.Sprintf("%v ended unexpectedly: %v", h, err))
			h.state = hLost
		}
	}
	for _, h := range w.liveSessions() {
		switch err := h.S.Err(); {
		case terminated[h.pid]:
			if !waitClosed(h.S.Done(), settleBound) || !errors.Is(h.S.Err(), advisory.ErrLockLost) {
				bad = append(bad, fmt.Sprintf("%v: its backend was terminated; %v later Err is %v, want ErrLockLost", h, settleBound, h.S.Err()))
			}
			h.state = hLost
		case err != nil && w.dead[h.pid] && errors.Is(err, advisory.ErrLockLost):
			h.state = hLost
		case err != nil:
			bad = append(bad, fmt.Sprintf("%v (holding %v) ended unexpectedly: %v", h, h.heldNames(), err))
			h.state = hLost
		}
	}
	return bad
}
