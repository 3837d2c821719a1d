package modelcheck

import (
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/pgadvisory/advisory"
)

// Judging a batch: each call's result against the API's contract, given what the model
// knew before the batch, then applying the result to the model.

// verdict collects what one call did wrong.
type verdict struct {
	w      *world
	o      *op
	closed bool // the call's Manager was closed by this batch
	lossOK bool // a loss is explained: a backend was terminated or the Manager closed
	bad    []string
}

func (v *verdict) fail(format string, args ...any) {
	v.bad = append(v.bad, fmt.Sprintf("call %d, %v: ", v.o.idx, v.o)+fmt.Sprintf(format, args...))
}

// judgeOrder: calls that take first, then those that release, then Close and terminate.
func judgeOrder(k opKind) int {
	switch k {
	case opUnlock, opSUnlock, opSClose:
		return 1
	case opClose, opTerminate:
		return 2
	}
	return 0
}

func (w *world) judge(ops []*op) []string {
	closed, terminated := map[*advisory.Manager]bool{}, map[uint32]bool{}
	for _, o := range ops {
		if o.kind == opTerminate && o.res.victim != 0 {
			terminated[o.res.victim], w.dead[o.res.victim] = true, true
		}
		if o.kind == opClose {
			closed[o.m] = true
		}
		if o.sh != nil && graceRanOut(o) {
			w.dead[o.sh.pid] = true
		}
	}
	sorted := slices.Clone(ops)
	sort.SliceStable(sorted, func(i, j int) bool { return judgeOrder(sorted[i].kind) < judgeOrder(sorted[j].kind) })
	w.beforeJudge(ops)
	w.trackTxRows(ops) // before the Unlocks and Closes that commit them are judged
	var bad []string
	for _, o := range sorted {
		m, pid := o.m, uint32(0)
		switch {
		case o.sh != nil:
			m, pid = o.sh.m, o.sh.pid
		case o.lh != nil:
			m, pid = o.lh.m, o.lh.pid
		}
		v := &verdict{w: w, o: o, closed: closed[m]}
		v.lossOK = o.disrupted || v.closed || w.dead[pid]
		v.judge()
		w.checks[o.kind] = max(w.checks[o.kind], o.res.checks)
		bad = append(bad, v.bad...)
		w.count(o)
	}
	return append(bad, w.reconcile(terminated)...)
}

func (v *verdict) judge() {
	o, r := v.o, &v.o.res
	if r.panicked != nil && !((o.kind == opDo || o.kind == opLead || o.fenced()) && o.fn == fnPanic) && !o.nest.nestedPanicked() {
		v.fail("panicked: %v", r.panicked)
	}
	if r.ctxEnded && o.kind != opSClose && o.kind != opClose && o.kind != opTerminate {
		late := r.end.Sub(r.ctxEnd)
		v.w.maxLate = max(v.w.maxLate, late)
		if late > lateBound {
			v.fail("returned %v after its ctx ended (must be within %v)", late.Round(time.Millisecond), lateBound)
		}
	}
	switch o.kind {
	case opLock, opTryLock:
		v.lock()
	case opUnlock:
		v.unlock()
	case opSession:
		v.session()
	case opSLock, opSTryLock, opSLockAll, opSTryLockAll:
		v.sessionLock()
	case opSUnlock:
		v.sessionUnlock()
	case opSClose:
		v.sessionClose()
	case opDo, opLead:
		v.fnCall()
	case opHolders:
		v.holders()
	case opTerminate:
		if r.err != nil {
			v.fail("pg_terminate_backend: %v", r.err)
		}
	case opClose:
		v.close()
	default:
		v.fenceCall()
	}
}

// doneCtx judges a call whose ctx was done before it began: it must return ctx's error
// and change nothing. It reports whether the call had such a ctx.
func (v *verdict) doneCtx() bool {
	if v.o.plan.kind != ctxDone {
		return false
	}
	err := v.o.res.err
	switch {
	case v.o.isCtx(err):
	case v.lossOK && errors.Is(err, advisory.ErrLockLost), v.closed && errors.Is(err, advisory.ErrClosed):
		// The target was lost or closed by another call of the batch, perhaps first.
	case v.o.rivalClose && errors.Is(err, advisory.ErrNotHeld):
	default:
		v.fail("with an already-done ctx: got %v, want an error wrapping %v, and no change", err, v.o.res.ctxErr)
	}
	return true
}

func (v *verdict) lock() {
	o, r, w := v.o, &v.o.res, v.w
	if v.doneCtx() {
		return
	}
	switch {
	case r.err == nil && r.lock == nil:
		v.fail("returned a nil Lock and a nil error")
	case r.err == nil:
		if o.isolated && !o.free {
			v.fail("succeeded while the model has pids %v holding %s", w.holderPIDs(o.names[0]), o.names[0])
		}
		want := o.full[0]
		if o.byKey {
			want = "" // a lock taken by key has no name
		}
		if r.lock.Name() != want || r.lock.Shared() != o.shared {
			v.fail("the Lock reports name %q, shared %v", r.lock.Name(), r.lock.Shared())
		}
		w.nextID++
		w.locks = append(w.locks, &lockH{id: w.nextID, slot: o.slot, app: o.app, m: o.m, name: o.names[0], shared: o.shared,
			l: r.lock, pid: r.lock.PID(), sharing: r.lock.SharesSession(), txHolding: holdingOf(o.m)})
	case o.isCtx(r.err):
		if o.isolated && o.free && o.plan.kind == ctxLive {
			v.fail("its ctx ran out (%v) although nothing held %s: %v", liveBound, o.names[0], r.err)
		}
	case o.kind == opTryLock && errors.Is(r.err, advisory.ErrLocked):
		if o.isolated && o.free {
			v.fail("ErrLocked although nothing held %s: %v", o.names[0], r.err)
		}
	case v.closed && errors.Is(r.err, advisory.ErrClosed):
	default:
		v.fail("unexpected error: %v", r.err)
	}
}

func (v *verdict) unlock() {
	o, r, h := v.o, &v.o.res, v.o.lh
	if o.pre != hLive {
		v.endedTarget()
		return
	}
	switch {
	case r.err == nil, o.isCtx(r.err):
		// With an ended ctx, Lock.Unlock is documented to close the connection instead.
	case o.rivalClose && errors.Is(r.err, advisory.ErrNotHeld):
	case v.lossOK && errors.Is(r.err, advisory.ErrLockLost), v.releasedAnyway(&h.txHolding):
	default:
		v.fail("unexpected error: %v", r.err)
	}
	ended, endErr := isClosed(h.l.Done()), h.l.Err()
	defer v.endTx(&h.txHolding, ended, h.pid, h.m)
	switch {
	case !ended && r.err == nil:
		v.fail("returned nil, but Done is not closed")
	case !ended:
		// A rival Unlock still under way, or an ended ctx that left the Lock held: the
		// invariants check which.
	case r.err == nil && !errors.Is(endErr, advisory.ErrNotHeld):
		v.fail("returned nil, but Err is %v, want ErrNotHeld", endErr)
		h.state = hLost
	case errors.Is(endErr, advisory.ErrNotHeld):
		h.state = hReleased
	case v.lossOK && errors.Is(endErr, advisory.ErrLockLost):
		h.state = hLost
	default:
		v.fail("after Unlock, Err is %v", endErr)
		h.state = hLost
	}
}

// endedTarget judges a call on a Lock or Session that had ended before the batch: it
// returns the end (ErrNotHeld after Unlock or Close, the loss after a loss) at once.
func (v *verdict) endedTarget() {
	o := v.o
	want := advisory.ErrNotHeld
	if o.pre == hLost {
		want = advisory.ErrLockLost
	}
	closed := o.rivalClose || (o.sh != nil && o.sh.closed)
	if !errors.Is(o.res.err, want) && !o.isCtx(o.res.err) && !(closed && errors.Is(o.res.err, advisory.ErrNotHeld)) {
		v.fail("on a %v target: got %v, want %v", o.pre, o.res.err, want)
	}
}

func (v *verdict) session() {
	o, r, w := v.o, &v.o.res, v.w
	if v.doneCtx() {
		return
	}
	switch {
	case r.err == nil && r.sess == nil:
		v.fail("returned a nil Session and a nil error")
	case r.err == nil:
		w.nextID++
		w.sessions = append(w.sessions, &sessH{id: w.nextID, slot: o.slot, app: o.app, m: o.m, S: r.sess, pid: r.sess.PID(),
			held: map[string]int{}, txHolding: holdingOf(o.m)})
	case o.isCtx(r.err):
		if o.isolated && o.plan.kind == ctxLive {
			v.fail("its ctx ran out (%v): %v", liveBound, r.err)
		}
	case v.closed && errors.Is(r.err, advisory.ErrClosed):
	default:
		v.fail("unexpected error: %v", r.err)
	}
}

func (v *verdict) holders() {
	o, r, w := v.o, &v.o.res, v.w
	if v.doneCtx() {
		return
	}
	switch {
	case r.err == nil:
		if !o.isolated || r.ctxErr != nil {
			return
		}
		var got []uint32
		for _, h := range r.holders {
			if !h.Granted {
				v.fail("Holders shows pid %d waiting; nothing waits", h.PID)
			}
			got = append(got, h.PID)
		}
		slices.Sort(got)
		if want := w.holderPIDs(o.names[0]); !slices.Equal(got, want) {
			v.fail("Holders shows pids %v, the model %v", got, want)
		}
	case o.isCtx(r.err):
	case v.closed && errors.Is(r.err, advisory.ErrClosed):
	default:
		v.fail("unexpected error: %v", r.err)
	}
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

func waitClosed(ch <-chan struct{}, d time.Duration) bool {
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ch:
		return true
	case <-timer.C:
		return false
	}
}

// graceRanOut reports whether o's wait was cancelled and the server did not confirm the
// cancel within the cancel grace, so the library closed the connection (WithCancelGrace):
// a Session on it is lost, as if terminated. It happens when the machine is so busy that
// the CancelRequest (a new connection the postmaster forks a process for) takes longer
// than the grace.
func graceRanOut(o *op) bool {
	r := &o.res
	return r.ctxEnded && errors.Is(r.err, advisory.ErrLockLost) && r.end.Sub(r.ctxEnd) >= cancelGrace &&
		strings.Contains(r.err.Error(), "timeout")
}
