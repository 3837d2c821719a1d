package modelcheck

import (
	"errors"
	"fmt"
	"slices"

	"github.com/pgadvisory/advisory"
)

// Judging the fencing calls' results, right after the batch (their rows and the tokens in
// the table are judged once the server has settled: see fence_rows.go).

// beforeJudge marks the backends of fenced calls and Tokens that reported a loss because
// their ctx ended (the server did not answer the CancelRequest within the cancel grace,
// so the connection was closed, as documented) as dead: that loss is explained.
func (w *world) beforeJudge(ops []*op) {
	for _, o := range ops {
		if (!o.fenced() && o.kind != opToken) || o.pre != hLive || o.res.ctxErr == nil || !errors.Is(o.res.err, advisory.ErrLockLost) {
			continue
		}
		switch {
		case o.lh != nil:
			w.dead[o.lh.pid] = true
		case o.sh != nil:
			w.dead[o.sh.pid] = true
		}
		if o.disrupted {
			continue // perhaps the termination or Close
		}
		w.fence.ctxLoss++
		if len(w.fence.ctxLossSeen) < 3 {
			w.fence.ctxLossSeen = append(w.fence.ctxLossSeen, fmt.Sprintf("step %d: %v → %s", o.step, o, o.outcome()))
		}
	}
}

func (v *verdict) fenceCall() {
	if o := v.o; o.lh != nil && o.lh.sharing && (o.kind == opBegin || o.kind == opToken) {
		// Refused first, whatever the Lock's state: it has no session of its own.
		if !errors.Is(o.res.err, advisory.ErrSharedSession) || o.res.fnCalls > 0 {
			v.fail("on a Lock that shares its session: want ErrSharedSession and fn not run; got %v, fn ran %dx",
				o.res.err, o.res.fnCalls)
		}
		return
	}
	switch v.o.kind {
	case opBegin, opSBegin:
		v.fencedTx()
	case opDoTx:
		v.doTx()
	case opToken:
		v.token()
	case opCheckToken:
		v.checkToken()
	}
}

// fencedTx judges Lock.BeginFunc and Session.BeginFunc.
func (v *verdict) fencedTx() {
	o, r := v.o, &v.o.res
	if r.fnCalls > 0 && (o.pre != hLive || o.plan.kind == ctxDone) {
		v.fail("fn ran on a %v target with ctx %v", o.pre, o.plan)
	}
	if o.pre != hLive {
		v.endedTarget()
		return
	}
	switch {
	case o.txOpts:
		v.optsRefused()
	case !v.doneCtx():
		v.txResult()
	}
	v.heldAfter()
}

func (v *verdict) doTx() {
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
	v.txResult()
}

// txResult judges a fenced call's error against what fn did.
func (v *verdict) txResult() {
	o, r := v.o, &v.o.res
	err := r.err
	lost := v.lossOK && errors.Is(err, advisory.ErrLockLost)
	closed := v.closed && errors.Is(err, advisory.ErrClosed)
	if r.fnCalls == 0 {
		switch {
		case r.panicked != nil:
			v.fail("panicked (%v) without running fn", r.panicked)
		case err == nil:
			v.fail("returned nil without running fn")
		case o.isCtx(err), lost, closed, o.rivalClose && errors.Is(err, advisory.ErrNotHeld):
		default:
			v.fail("fn never ran; unexpected error: %v", err)
		}
		return
	}
	if r.fnCalls > 1 {
		v.fail("fn ran %d times", r.fnCalls)
	}
	switch {
	case r.fence.insertErr != nil:
		if err == nil || !(o.isCtx(err) || lost || closed) {
			v.fail("fn's insert failed (%v); got %v, want ctx's error or a loss", r.fence.insertErr, err)
		}
	case o.fn == fnPanic:
		if _, ok := r.panicked.(modelPanic); !ok {
			v.fail("fn panicked, but %s returned %v (panic value %v) instead of letting the panic through", o.kind, err, r.panicked)
		}
	case o.fn == fnErr:
		if !errors.Is(err, errModelFn) || (errors.Is(err, advisory.ErrLockLost) && !v.lossOK) {
			v.fail("fn returned errModelFn; got %v", err)
		}
	case o.fin.poison && o.kind == opDoTx:
		if err == nil {
			v.fail("returned nil, but its row fails the COMMIT")
		}
	case err != nil && !o.isCtx(err) && !lost && !closed:
		v.fail("fn returned nil or ctx.Err(); got %v", err)
	}
}

// heldAfter: after a fenced call or a Token on a live target that did not report a loss,
// the target is still live (the invariants check pg_locks); after a loss, Done is closed
// and Err wraps ErrLockLost.
func (v *verdict) heldAfter() {
	o := v.o
	done, errOf := func() <-chan struct{} { return nil }, func() error { return nil }
	switch {
	case o.lh != nil:
		done, errOf = o.lh.l.Done, o.lh.l.Err
	case o.sh != nil:
		done, errOf = o.sh.S.Done, o.sh.S.Err
	}
	if errors.Is(o.res.err, advisory.ErrLockLost) {
		if !waitClosed(done(), settleBound) || !errors.Is(errOf(), advisory.ErrLockLost) {
			v.fail("returned a loss, but %v later Done closed %v, Err %v", settleBound, isClosed(done()), errOf())
		}
		v.markLost()
		return
	}
	switch {
	case !isClosed(done()), v.lossOK, o.rivalClose:
	case o.res.ctxErr != nil && errors.Is(errOf(), advisory.ErrLockLost):
		// ctx ended during COMMIT or the statement, and the server did not answer the
		// CancelRequest within the cancel grace: the connection was closed (documented).
		v.w.fence.ctxLoss++
		v.markLost()
	default:
		v.fail("returned %v, not a loss, but Done is closed: Err %v", o.res.err, errOf())
	}
}

func (v *verdict) markLost() {
	switch o := v.o; {
	case o.lh != nil:
		o.lh.state = hLost
	case o.sh != nil:
		o.sh.state = hLost
	}
}

// token judges Lock.Token. Whether the token is new is judged against the table after
// the batch (fenceTokens). A shared Lock has no token: ErrSharedToken and nothing else,
// whatever its state and ctx, and the lock is kept.
func (v *verdict) token() {
	o, r := v.o, &v.o.res
	tok, cached := r.fence.token, o.fin.cached
	if o.lh.shared {
		if tok != 0 || !errors.Is(r.err, advisory.ErrSharedToken) {
			v.fail("Token of a shared lock: got %d, %v; want ErrSharedToken", tok, r.err)
		}
		if o.pre == hLive {
			v.heldAfter()
		}
		return
	}
	if o.pre != hLive {
		v.endedTarget()
		return
	}
	switch {
	case o.plan.kind == ctxDone && r.err == nil && (tok == cached || v.takenInBatch(tok)):
		// A cached token (perhaps taken by another call of the batch) is returned at once,
		// whatever ctx.
	case v.doneCtx():
	case r.err == nil:
		switch {
		case cached != 0 && tok != cached:
			v.fail("returned %d, but an earlier call returned %d", tok, cached)
		case cached == 0 && tok <= o.fin.pre:
			v.fail("returned %d, not greater than the key's newest token %d before the batch", tok, o.fin.pre)
		}
		if o.lh.token == 0 {
			o.lh.token = tok
		}
	case o.isCtx(r.err):
	case v.lossOK && errors.Is(r.err, advisory.ErrLockLost):
	case o.rivalClose && errors.Is(r.err, advisory.ErrNotHeld):
	default:
		v.fail("unexpected error: %v", r.err)
	}
	v.heldAfter()
}

func (v *verdict) checkToken() {
	o, r := v.o, &v.o.res
	if v.doneCtx() {
		return
	}
	stale := errors.Is(r.err, advisory.ErrStaleToken)
	switch {
	case r.err == nil && o.fin.pair:
		v.fail("accepted a pair's token, but no pair lock ever took one: the name's key and the pair share a counter")
	case o.fin.pair && (stale || o.isCtx(r.err)):
	case r.err == nil && o.fin.tok == tokStale:
		v.fail("accepted a stale token")
	case r.err == nil && o.fin.tok == tokNever && o.isolated:
		v.fail("accepted a token no holder took")
	case r.err == nil:
	case stale && o.fin.tok == tokCurrent && o.isolated:
		v.fail("refused the newest token: %v", r.err)
	case stale, o.isCtx(r.err):
	default:
		v.fail("unexpected error: %v", r.err)
	}
}

// takenInBatch reports whether another Token call of the batch on the same Lock took tok.
func (v *verdict) takenInBatch(tok int64) bool {
	return slices.ContainsFunc(v.w.batch, func(p *op) bool {
		return p != v.o && p.kind == opToken && p.lh == v.o.lh && p.res.err == nil && p.res.fence.token == tok
	})
}
