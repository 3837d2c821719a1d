package modelcheck

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/pgadvisory/advisory/internal/checkctx"
)

// How a call's ctx ends: the plan the generator draws, and the ctx the call runs with.

// ctxKind is how a call's ctx ends.
type ctxKind int

const (
	ctxLive     ctxKind = iota // only at liveBound
	ctxDone                    // already before the call
	ctxCancelAt                // cancelled by a timer after d
	ctxDeadline                // deadline d
	ctxCheck                   // cancelled at its n-th Err check (see checkctx.Context)
)

type ctxPlan struct {
	kind ctxKind
	d    time.Duration
	n    int
}

func (p ctxPlan) String() string {
	switch p.kind {
	case ctxDone:
		return "done"
	case ctxCancelAt:
		return "cancel@" + p.d.String()
	case ctxDeadline:
		return "deadline " + p.d.String()
	case ctxCheck:
		if p.d > 0 {
			return fmt.Sprintf("cancel@check#%d or deadline %v", p.n, p.d)
		}
		return fmt.Sprintf("cancel@check#%d", p.n)
	}
	return "live"
}

// build makes the call's ctx. Every ctx ends by liveBound.
func (p ctxPlan) build() *callCtx { return p.buildOn(context.Background()) }

// buildOn makes a ctx derived from parent (a nested call's: see nested.go).
func (p ctxPlan) buildOn(parent context.Context) *callCtx {
	c := &callCtx{}
	bound, cancelBound := context.WithTimeout(parent, liveBound)
	c.stops = append(c.stops, cancelBound)
	switch p.kind {
	case ctxDone:
		ctx, cancel := context.WithCancel(bound)
		cancel()
		c.ctx, c.endAt = ctx, time.Now()
	case ctxCancelAt:
		ctx, cancel := context.WithCancel(bound)
		timer := time.AfterFunc(p.d, cancel)
		c.ctx, c.stops = ctx, append(c.stops, func() { timer.Stop(); cancel() })
	case ctxDeadline:
		ctx, cancel := context.WithTimeout(bound, p.d)
		c.ctx, c.stops = ctx, append(c.stops, cancel)
	case ctxCheck:
		parent := bound
		if p.d > 0 {
			ctx, cancel := context.WithTimeout(bound, p.d)
			parent, c.stops = ctx, append(c.stops, cancel)
		}
		c.check = checkctx.CancelAt(parent, p.n)
		c.ctx = c.check
	default:
		c.ctx = bound
	}
	stop := context.AfterFunc(c.ctx, c.ended)
	c.stops = append(c.stops, func() { stop() })
	return c
}

// genPlan draws how the call's ctx ends. A call the model expects to block on a held
// lock mostly gets a short ctx, so that steps stay short; sometimes a long one, so that
// calls queue behind it.
func (w *world) genPlan(o *op) ctxPlan {
	blocks := w.wouldBlock(o)
	r := w.rng.IntN(100)
	if (o.kind == opDo || o.kind == opLead || o.fenced()) && r >= 65 && w.rng.IntN(2) == 0 {
		r = 50 // Do and Lead check ctx in several phases: land on each more often
	}
	switch {
	case r < 12:
		return ctxPlan{kind: ctxDone}
	case r < 30:
		d := time.Duration(w.rng.IntN(3000)) * time.Microsecond
		if w.rng.IntN(2) == 0 {
			d = time.Duration(w.rng.IntN(60)) * time.Millisecond
		}
		return ctxPlan{kind: ctxCancelAt, d: d}
	case r < 50:
		return ctxPlan{kind: ctxDeadline, d: time.Duration(5+w.rng.IntN(300)) * time.Millisecond}
	case r < 65:
		// Each of the checks this kind of call was seen to make, alike; until seen, small n
		// more often. A blocked call checks nothing while it waits: bound it.
		p := ctxPlan{kind: ctxCheck, n: 1 + w.rng.IntN(1+w.rng.IntN(12))}
		if seen := min(w.checks[o.kind], 12); seen > 0 {
			p.n = 1 + w.rng.IntN(seen)
		}
		if blocks {
			p.d = time.Duration(20+w.rng.IntN(200)) * time.Millisecond
		}
		return p
	case !blocks:
		return ctxPlan{kind: ctxLive}
	case w.rng.IntN(12) == 0 || (o.sh != nil && w.rng.IntN(3) == 0):
		// Long: calls of the same Session (or Manager and name) queue behind it.
		return ctxPlan{kind: ctxDeadline, d: liveBound - time.Duration(w.rng.IntN(1000))*time.Millisecond}
	}
	return w.shortWait()
}

func (w *world) shortWait() ctxPlan {
	return ctxPlan{kind: ctxDeadline, d: time.Duration(20+w.rng.IntN(200)) * time.Millisecond}
}

// wouldBlock reports whether the model expects a blocking call to wait for a holder.
func (w *world) wouldBlock(o *op) bool {
	switch o.kind {
	case opLock, opDo, opLead, opDoTx:
		return !w.compatible(o.names[0], o.shared, nil)
	case opSLock, opSLockAll:
		for _, n := range o.names {
			if !w.compatible(n, false, o.sh) {
				return true
			}
		}
	}
	return false
}

// callCtx is one call's context, and when it ended.
type callCtx struct {
	ctx   context.Context
	check *checkctx.Context // for ctxCheck
	stops []func()
	mu    sync.Mutex
	endAt time.Time
}

func (c *callCtx) ended() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.endAt.IsZero() {
		c.endAt = time.Now()
	}
}

func (c *callCtx) endedAt() (time.Time, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.endAt, !c.endAt.IsZero()
}

func (c *callCtx) release() {
	for i := len(c.stops) - 1; i >= 0; i-- {
		c.stops[i]()
	}
}
