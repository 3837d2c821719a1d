package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"time"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/checkctx"
)

// Running a batch: each call in its own goroutine, touching only its op.

// runBatch runs the calls at once and waits for all of them. It returns a goroutine
// dump if they did not all return within hangBound.
func runBatch(ops []*op) (hang string) {
	var wg sync.WaitGroup
	for _, o := range ops {
		wg.Add(1)
		go func() {
			defer wg.Done()
			o.run()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	timer := time.NewTimer(hangBound)
	defer timer.Stop()
	select {
	case <-done:
		return ""
	case <-timer.C:
		buf := make([]byte, 1<<20)
		return string(buf[:runtime.Stack(buf, true)])
	}
}

func (o *op) run() {
	if o.after > 0 {
		// A random start offset, so that calls of one batch interleave differently.
		<-time.After(o.after)
	}
	c := o.plan.build()
	defer c.release()
	o.res.start = time.Now()
	func() {
		defer func() {
			// As net/http does for a handler: Do and Lead let fn's panic through.
			if r := recover(); r != nil {
				o.res.panicked = r
			}
		}()
		o.call(c.ctx)
	}()
	o.res.end = time.Now()
	o.res.ctxEnd, o.res.ctxEnded = c.endedAt()
	o.res.ctxErr = checkctx.ErrIfDone(c.ctx)
	if c.check != nil {
		o.res.checks = c.check.Checks()
	}
	if o.res.ctxErr != nil && !o.res.ctxEnded {
		// Ended just now, and the AfterFunc has not run yet: not late.
		o.res.ctxEnd, o.res.ctxEnded = o.res.end, true
	}
}

func (o *op) call(ctx context.Context) {
	r := &o.res
	switch o.kind {
	case opLock:
		switch {
		case o.shared:
			r.lock, r.err = o.m.LockShared(ctx, o.full[0])
		case o.byKey:
			r.lock, r.err = o.m.LockKey(ctx, advisory.KeyOf(o.full[0]))
		default:
			r.lock, r.err = o.m.Lock(ctx, o.full[0])
		}
	case opTryLock:
		switch {
		case o.shared:
			r.lock, r.err = o.m.TryLockShared(ctx, o.full[0])
		case o.byKey:
			r.lock, r.err = o.m.TryLockKey(ctx, advisory.KeyOf(o.full[0]))
		default:
			r.lock, r.err = o.m.TryLock(ctx, o.full[0])
		}
	case opUnlock:
		r.err = o.lh.l.Unlock(ctx)
	case opSession:
		r.sess, r.err = o.m.Session(ctx)
	case opDo:
		defer o.afterDo()
		r.err = o.m.Do(ctx, o.full[0], o.fnBody)
	case opLead:
		r.err = o.m.Lead(ctx, o.full[0], o.fnBody)
	case opHolders:
		r.holders, r.err = o.m.Holders(ctx, o.full[0])
	case opTerminate:
		r.victim, r.err = terminateAHolder(o.admin, o.apps, o.pick, o.fin.prefer)
	case opClose:
		o.closeAndRenew()
	case opBegin, opSBegin, opDoTx, opToken, opCheckToken:
		o.fenceCall(ctx)
	default:
		o.sessionCall(ctx)
	}
}

func (o *op) sessionCall(ctx context.Context) {
	S, r := o.sh.S, &o.res
	switch o.kind {
	case opSLock:
		r.err = S.Lock(ctx, o.full[0])
	case opSTryLock:
		r.err = S.TryLock(ctx, o.full[0])
	case opSLockAll:
		r.err = S.LockAll(ctx, o.full)
	case opSTryLockAll:
		r.err = S.TryLockAll(ctx, o.full)
	case opSUnlock:
		r.err = S.Unlock(ctx, o.full[0])
	case opSClose:
		r.err = S.Close(ctx)
	}
}

// fnBody is the function given to Do and Lead. It first asks the server whether its
// Manager holds the lock exclusively: fn must run only while it does.
func (o *op) fnBody(ctx context.Context) error {
	o.res.fnCalls++
	pid, err := exclusiveHolder(o.admin, o.keys[0], o.app)
	switch {
	case err != nil:
		o.res.fnBad = append(o.res.fnBad, fmt.Sprintf("fn could not read pg_locks: %v", err))
	case pid == 0:
		o.res.fnBad = append(o.res.fnBad, fmt.Sprintf("fn ran, but pg_locks shows no exclusive hold of %s by %s", o.names[0], o.app))
	default:
		o.res.fnPIDs = append(o.res.fnPIDs, pid)
		if o.nest != nil && o.res.fnCalls == 1 {
			o.runNested(ctx, pid)
		}
	}
	return o.fnOutcome(ctx)
}

// closeAndRenew closes the Manager, checks that every call on it then returns
// ErrClosed, and opens a new one in its place.
func (o *op) closeAndRenew() {
	o.res.fence.closeStart = time.Now()
	o.m.Close()
	o.res.fence.closedAt = time.Now()
	o.m.Close() // a second Close returns at once
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ran := false
	fn := func(context.Context) error { ran = true; return nil }
	const name = "closed" // any valid name: nothing may reach the server
	calls := map[string]func() error{
		"Lock":          func() error { _, err := o.m.Lock(ctx, name); return err },
		"TryLock":       func() error { _, err := o.m.TryLock(ctx, name); return err },
		"LockShared":    func() error { _, err := o.m.LockShared(ctx, name); return err },
		"TryLockShared": func() error { _, err := o.m.TryLockShared(ctx, name); return err },
		"Session":       func() error { _, err := o.m.Session(ctx); return err },
		"Holders":       func() error { _, err := o.m.Holders(ctx, name); return err },
		"Do":            func() error { return o.m.Do(ctx, name, fn) },
		"Lead":          func() error { return o.m.Lead(ctx, name, fn) },
	}
	for _, call := range []string{"Lock", "TryLock", "LockShared", "TryLockShared", "Session", "Holders", "Do", "Lead"} {
		if err := calls[call](); !errors.Is(err, advisory.ErrClosed) {
			o.res.bad = append(o.res.bad, fmt.Sprintf("%s after Close returned %v, want ErrClosed", call, err))
		}
	}
	if ran {
		o.res.bad = append(o.res.bad, "Do or Lead after Close ran fn")
	}
	o.res.newMgr, o.res.err = advisory.New(ctx, o.dsn, o.opts...)
}

// fnOutcome ends a callback the way the op drew: return nil or an error, panic, or wait
// (returning ctx's error if ctx ends first).
func (o *op) fnOutcome(ctx context.Context) error {
	return fnOutcome(ctx, o.fn, o.fnWait, modelPanic{step: o.step, op: o.idx})
}

// fnOutcome ends a callback as fn says, panicking with p or waiting up to wait.
func fnOutcome(ctx context.Context, fn fnKind, wait time.Duration, p modelPanic) error {
	switch fn {
	case fnErr:
		return errModelFn
	case fnPanic:
		panic(p)
	case fnWait:
		timer := time.NewTimer(wait)
		defer timer.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-timer.C:
		}
	}
	return nil
}
