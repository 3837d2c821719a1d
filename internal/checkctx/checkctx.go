// Package checkctx provides contexts that are cancelled at the n-th look at them, so
// that a test can end a call's ctx exactly at each place the code under test checks it.
package checkctx

import (
	"context"
	"slices"
	"sync"
	"time"
)

// Context is a context that is cancelled at the moment its Err method is called for the
// n-th time (see [CancelAt]) or its Done method is (see [CancelAtDone]), or when its
// parent ends. A timer lands a cancellation between two given statements only by luck;
// this one lands it exactly at the n-th place the code under test looks at ctx, so
// trying n = 1, 2, 3, ... visits every such place in turn. It is a valid Context: Done is
// closed exactly when Err becomes non-nil, and Err never changes after that. Its
// cancellation is indistinguishable from one made by another goroutine just before that
// call.
//
// It implements AfterFunc (see context.AfterFunc), so that contexts derived from it and
// context.AfterFunc register with it instead of starting a goroutine that would look at
// Done at a moment of its own: every look is then made by the code under test.
type Context struct {
	parent context.Context
	n      int
	byDone bool // count Done calls, not Err calls

	mu     sync.Mutex
	calls  int
	err    error
	done   chan struct{}
	afters []*func() // AfterFunc registrations not yet run or stopped
}

// CancelAt returns a context derived from parent (Deadline and Value come from it)
// that is cancelled at the n-th call of its Err method.
func CancelAt(parent context.Context, n int) *Context {
	return newContext(parent, n, false)
}

// CancelAtDone returns a context derived from parent (Deadline and Value come from it)
// that is cancelled at the n-th call of its Done method: the places where code waits on
// ctx rather than asks it (a select, pgconn's watch of a statement's round trip,
// context.AfterFunc and the contexts derived from it). Err calls are not counted.
func CancelAtDone(parent context.Context, n int) *Context {
	return newContext(parent, n, true)
}

func newContext(parent context.Context, n int, byDone bool) *Context {
	c := &Context{parent: parent, n: n, byDone: byDone, done: make(chan struct{})}
	context.AfterFunc(parent, func() { c.cancel(parent.Err()) })
	return c
}

// Deadline returns the parent's deadline.
func (c *Context) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Value returns the parent's value for key.
func (c *Context) Value(key any) any { return c.parent.Value(key) }

// Done is closed when Err first returns non-nil. For a [CancelAtDone] context it counts a
// look; at the n-th it cancels the context before it returns.
func (c *Context) Done() <-chan struct{} {
	if c.byDone {
		c.count()
	}
	return c.done
}

// Err returns nil until the context is cancelled, then the same error ever after. For a
// [CancelAt] context it counts a check; at the n-th it cancels the context.
func (c *Context) Err() error {
	if !c.byDone {
		c.count()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.err
}

// count counts a look, and cancels the context at the n-th.
func (c *Context) count() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.calls++
		if c.calls == c.n {
			c.endLocked(context.Canceled)
		}
	}
}

// Checks returns how many looks (Err calls, or Done calls for a [CancelAtDone] context)
// were counted before the ctx ended (all of them, if it has not).
func (c *Context) Checks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

// AfterFunc arranges for f to run in its own goroutine once the context is cancelled, at
// once if it is; stop unregisters f and reports whether it did so before f was started.
func (c *Context) AfterFunc(f func()) (stop func() bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		go f()
		return func() bool { return false }
	}
	p := &f
	c.afters = append(c.afters, p)
	return func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		i := slices.Index(c.afters, p)
		if i < 0 {
			return false
		}
		c.afters = slices.Delete(c.afters, i, i+1)
		return true
	}
}

func (c *Context) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.endLocked(err)
	}
}

// endLocked cancels the context with err and starts the registered AfterFuncs; c.mu is
// held.
func (c *Context) endLocked(err error) {
	c.err = err
	close(c.done)
	for _, f := range c.afters {
		go (*f)()
	}
	c.afters = nil
}

// ErrIfDone returns ctx.Err() if ctx is done, else nil, without calling Err on a ctx
// that is not done (which would count as a check of a Context).
func ErrIfDone(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	default:
		return nil
	}
}
