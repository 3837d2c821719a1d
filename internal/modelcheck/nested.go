package modelcheck

import (
	"context"
	"fmt"
	"time"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/checkctx"
)

// Nested calls: a Do's fn makes a lock call of its own on the name it holds, with fn's
// ctx or one derived from it that ends as a call's ctx may (ctxplan.go). Its Manager's
// calls re-enter the holding; another Manager's is refused (ErrNotReentrant). Drawn for a
// third of the model's Do calls, run inside fn (runNested) and judged with the Do
// (nested_judge.go). A nested call ends what it takes before fn goes on, except the
// leaked Lock, which Do's end must end: the model's handles are unchanged by it.

type nestKind int

const (
	nestLock    nestKind = iota // Manager.Lock, then Unlock
	nestTryLock                 // Manager.TryLockKey, then Unlock
	nestShared                  // Manager.LockShared under the exclusive holding, then Unlock
	nestDo                      // Manager.Do, with an fn drawn as the model's
	nestTryDo                   // Manager.TryDo, with such an fn
	nestLeak                    // Manager.Lock, never unlocked: the end of Do ends it
	nestForeign                 // another Manager's Lock of the name: refused
)

var nestNames = [...]string{"Lock", "TryLockKey", "LockShared", "Do", "TryDo", "LockOpen", "other.Lock"}

var nestWeights = []int{4, 3, 2, 5, 3, 2, 2}

// nestCall is the nested call of one Do, its inputs drawn before the batch.
type nestCall struct {
	kind    nestKind
	plan    ctxPlan
	fn      fnKind
	fnWait  time.Duration
	atLeast time.Duration     // nestTryDo
	other   *advisory.Manager // nestForeign
	res     nestResult
}

// nestResult is what the nested call did, recorded on fn's goroutine.
type nestResult struct {
	ran       bool   // the outer fn reached the call
	outerPID  uint32 // the holding's backend, as the outer fn saw it
	err       error
	lock      *advisory.Lock // the Lock it returned (Lock kinds), or its fn's (Do, TryDo)
	start     time.Time
	at        time.Time // when it returned (Lock kinds) or its fn began (Do, TryDo)
	end       time.Time
	ctxEnded  bool
	ctxEnd    time.Time
	ctxErr    error // its ctx's error after the call, if it had ended
	unlockErr error
	tryRan    bool // nestTryDo: ran
	fnCalls   int
	fnBad     []string
	heldAfter uint32 // the exclusive holder of the name after the call returned
	heldErr   error  // reading it
	leakDone  bool   // nestLeak: once Do returned, Done closed
	leakErr   error  // and Err
}

func (n *nestCall) String() string {
	s := nestNames[n.kind]
	if n.kind == nestDo || n.kind == nestTryDo {
		s += fmt.Sprintf("(fn=%s)", [...]string{"nil", "err", "panic", "wait " + n.fnWait.String()}[n.fn])
	}
	return fmt.Sprintf("%s ctx=%v", s, n.plan)
}

// nestedBatch returns a batch of one Do that nests a call, on a name nothing holds (nil
// if there is none), mostly with a ctx that lets it reach fn, and sometimes a termination of
// a holder that may land during the nested call: most Do calls of ordinary batches
// contend, and their ctx ends before fn.
func (w *world) nestedBatch() []*op {
	slots := w.roomySlots(nil)
	free := w.freeNames()
	if len(slots) == 0 || len(free) == 0 {
		return nil
	}
	s := slots[w.rng.IntN(len(slots))]
	name := free[w.rng.IntN(len(free))]
	o := &op{kind: opDo, admin: w.admin, slot: s.String(), m: s.m, app: s.app, names: []string{name}}
	o.fn = fnKind(w.pickWeighted([]int{30, 25, 20, 25}))
	o.fnWait = time.Duration(w.rng.IntN(80)) * time.Millisecond
	o.nest = w.drawNest(o)
	o.full, o.keys = w.fulls(o.names), []advisory.Key{w.key(name)}
	o.plan = ctxPlan{kind: ctxLive}
	if w.rng.IntN(3) == 0 {
		o.plan = w.genPlan(o)
	}
	ops := []*op{o}
	if w.rng.IntN(4) == 0 {
		// A holder of the Do's Manager: often the Do's own holding, during the nested call,
		// which is then, one time in two, a Do whose fn waits long enough to be there.
		kill := &op{kind: opTerminate, admin: w.admin, pick: w.rng.Float64(),
			after: time.Duration(w.rng.IntN(40)) * time.Millisecond, apps: []string{o.app}}
		kill.plan = w.genPlan(kill)
		ops = append(ops, kill)
		if w.rng.IntN(2) == 0 {
			o.nest.kind, o.nest.fn = nestDo, fnWait
			o.nest.fnWait = time.Duration(40+w.rng.IntN(60)) * time.Millisecond
		}
	}
	for i, o := range ops {
		o.idx, o.step = i, w.step
	}
	w.analyse(ops)
	return ops
}

// genNest draws the nested call of a Do of an ordinary batch, or none.
func (w *world) genNest(o *op) *nestCall {
	if w.rng.IntN(3) != 0 {
		return nil
	}
	return w.drawNest(o)
}

// drawNest draws a nested call for the Do o.
func (w *world) drawNest(o *op) *nestCall {
	n := &nestCall{kind: nestKind(w.pickWeighted(nestWeights))}
	n.fn = fnKind(w.pickWeighted([]int{30, 25, 20, 25}))
	n.fnWait = time.Duration(w.rng.IntN(60)) * time.Millisecond
	n.atLeast = time.Duration(w.rng.IntN(50)) * time.Millisecond
	if n.kind == nestForeign {
		for n.other == nil || n.other == o.m {
			n.other = w.slots[w.rng.IntN(len(w.slots))].m
		}
	}
	switch r := w.rng.IntN(100); {
	case r < 40: // fn's ctx, as it is
	case r < 50:
		n.plan = ctxPlan{kind: ctxDone}
	case r < 70:
		n.plan = ctxPlan{kind: ctxCancelAt, d: time.Duration(w.rng.IntN(3000)) * time.Microsecond}
	case r < 85:
		n.plan = ctxPlan{kind: ctxDeadline, d: time.Duration(1+w.rng.IntN(100)) * time.Millisecond}
	default:
		n.plan = ctxPlan{kind: ctxCheck, n: 1 + w.rng.IntN(4)}
	}
	return n
}

// runNested makes o's nested call inside its fn (whose ctx is ctx, holding o's name on
// backend outerPID). A panic of the nested fn goes on up through fn, as the API lets it.
func (o *op) runNested(ctx context.Context, outerPID uint32) {
	n, r := o.nest, &o.nest.res
	r.ran, r.outerPID = true, outerPID
	c := n.plan.buildOn(ctx)
	defer c.release()
	r.start = time.Now()
	defer func() {
		r.end = time.Now()
		r.ctxEnd, r.ctxEnded = c.endedAt()
		r.ctxErr = checkctx.ErrIfDone(c.ctx)
		if r.ctxErr != nil && !r.ctxEnded { // ended just now, and the AfterFunc has not run yet
			r.ctxEnd, r.ctxEnded = r.end, true
		}
		r.heldAfter, r.heldErr = exclusiveHolder(o.admin, o.keys[0], o.app)
	}()
	unlock := func(l *advisory.Lock) {
		r.at = time.Now()
		if l != nil && n.kind != nestLeak {
			r.unlockErr = l.Unlock(context.Background())
		}
	}
	switch n.kind {
	case nestLock, nestLeak:
		r.lock, r.err = o.m.Lock(c.ctx, o.full[0])
		unlock(r.lock)
	case nestTryLock:
		r.lock, r.err = o.m.TryLockKey(c.ctx, o.keys[0])
		unlock(r.lock)
	case nestShared:
		r.lock, r.err = o.m.LockShared(c.ctx, o.full[0])
		unlock(r.lock)
	case nestForeign:
		var l *advisory.Lock
		l, r.err = n.other.Lock(c.ctx, o.full[0])
		unlock(l)
	case nestDo:
		r.err = o.m.Do(c.ctx, o.full[0], o.nestedFn)
	case nestTryDo:
		r.tryRan, r.err = o.m.TryDo(c.ctx, o.full[0], n.atLeast, o.nestedFn)
	}
}

// nestedFn is the fn of a nested Do or TryDo: it checks that it runs under the outer
// holding, re-entered, then ends as drawn.
func (o *op) nestedFn(ctx context.Context) error {
	n, r := o.nest, &o.nest.res
	r.at = time.Now()
	r.fnCalls++
	r.lock = advisory.LockFromContext(ctx)
	switch pid, err := exclusiveHolder(o.admin, o.keys[0], o.app); {
	case err != nil:
		r.fnBad = append(r.fnBad, fmt.Sprintf("the nested fn could not read pg_locks: %v", err))
	case pid != r.outerPID:
		r.fnBad = append(r.fnBad, fmt.Sprintf("the nested fn ran while pg_locks shows pid %d holding %s, not the holding's %d",
			pid, o.names[0], r.outerPID))
	}
	return fnOutcome(ctx, n.fn, n.fnWait, modelPanic{step: o.step, op: o.idx, nested: true})
}

// took is how long the call took to return, or to run its fn (Do, TryDo).
func (r *nestResult) took() time.Duration {
	if !r.at.IsZero() {
		return r.at.Sub(r.start)
	}
	return r.end.Sub(r.start)
}

// afterDo records, once Do has returned (or panicked), what became of the Lock a nested
// call left open.
func (o *op) afterDo() {
	if n := o.nest; n != nil && n.kind == nestLeak && n.res.lock != nil {
		n.res.leakDone, n.res.leakErr = isClosed(n.res.lock.Done()), n.res.lock.Err()
	}
}

// nestedPanicked reports whether the nested fn panicked (it ran, and was drawn to).
func (n *nestCall) nestedPanicked() bool {
	return n != nil && (n.kind == nestDo || n.kind == nestTryDo) && n.fn == fnPanic && n.res.fnCalls > 0
}
