// Package checkctx provides a context that is cancelled at the n-th look at it, so that
// a test can end a call's ctx exactly at each place the code under test checks it.
package checkctx

import (
	"context"
	"sync"
	"time"
)

// Context is a context that is cancelled at the moment its Err method is called for the
// n-th time, or when its parent ends. A timer lands a cancellation between two given
// statements only by luck; this one lands it exactly at the n-th place the code under
// test looks at ctx, so trying n = 1, 2, 3, ... visits every such place in turn. It is a
// valid Context: Done is closed exactly when Err becomes non-nil, and Err never changes
// after that. Its cancellation is indistinguishable from one made by another goroutine
// just before that Err call.
type Context struct {
	parent context.Context
	n      int

	mu    sync.Mutex
	calls int
	err   error
	done  chan struct{}
}

// CancelAt returns a context derived from parent (Deadline and Value come from it)
// that is cancelled at the n-th call of its Err method.
func CancelAt(parent context.Context, n int) *Context {
	c := &Context{parent: parent, n: n, done: make(chan struct{})}
	context.AfterFunc(parent, func() { c.cancel(parent.Err()) })
	return c
}

// Deadline returns the parent's deadline.
func (c *Context) Deadline() (time.Time, bool) { return c.parent.Deadline() }

// Value returns the parent's value for key.
func (c *Context) Value(key any) any { return c.parent.Value(key) }

// Done is closed when Err first returns non-nil.
func (c *Context) Done() <-chan struct{} { return c.done }

// Err counts a check; at the n-th it cancels the context. Once cancelled (or the parent
// ended), it returns the same error ever after without counting.
func (c *Context) Err() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.calls++
		if c.calls == c.n {
			c.err = context.Canceled
			close(c.done)
		}
	}
	return c.err
}

// Checks returns how many times Err was called before the ctx ended (all of them, if
// it has not).
func (c *Context) Checks() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.calls
}

func (c *Context) cancel(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err == nil {
		c.err = err
		close(c.done)
	}
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
