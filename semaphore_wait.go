package advisory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// SemaphoreRecheck bounds how long a waiting [Semaphore.Acquire] can miss a freed slot.
// The first waiter waits on the server for one slot and LISTENs for the NOTIFY that a
// [Lock] of a slot sends, once it has ended, to the semaphore's channel; it tries all
// slots again when one comes, when a slot Lock of its own process ends, and at the latest
// every SemaphoreRecheck, moving on to wait for the next slot. So a slot that is
// unlocked is handed over at once; one freed by a crash (no NOTIFY) at once if it is the
// slot waited for, else within SemaphoreRecheck.
const SemaphoreRecheck = time.Second

// Acquire takes a slot of the semaphore, blocking until one is held or ctx ends. ctx
// governs the whole call: getting pool connections, the queue and the waits. It tries the
// slots first; if all are held it queues on the turnstile lock (the server's order across
// processes, this Manager's within it), and the first in the queue waits on the server
// for one slot while NOTIFY tells it of others, so no waiter is starved. It needs up to
// five pool connections besides the slots held (else [ErrPoolExhausted] with ctx's error).
//
// The returned [Lock] is an ordinary lock on the slot's name: Unlock frees the slot (once
// it returns, nothing of the call is held or waited for); Done and Err report its loss.
// If ctx ends first, the error satisfies errors.Is(err, ctx.Err()) and neither a slot nor
// the turnstile is held; on a closed Manager it returns [ErrClosed]. A semaphore is not
// reentrant: a ctx that carries a slot of it ([LockFromContext]) fails at once with
// [ErrNotReentrant]. docs/semaphore.md has the full contract.
func (sem *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	start := time.Now()
	if err := sem.refuseNested(ctx); err != nil {
		return sem.report(ctx, false, start, nil, sem.error("acquire", err))
	}
	l, err := sem.acquire(ctx)
	return sem.report(ctx, false, start, l, err)
}

// acquire is Acquire without its report: the tries, then the queue.
func (sem *Semaphore) acquire(ctx context.Context) (*Lock, error) {
	l, err := sem.tryAll(ctx, false)
	switch {
	case l != nil:
		return l, nil
	case err != nil && !errors.Is(err, ErrPoolExhausted):
		return nil, sem.waitError(ctx, err)
	}
	ts, err := sem.m.attempt(ctx, sem.turnstile, modeLock)
	if err != nil {
		return nil, sem.waitError(ctx, err)
	}
	l, err = sem.await(ctx)
	// The turnstile is let go in every case. If its release cannot be confirmed, Unlock
	// has closed its connection, which frees it on the server: the next waiter goes on.
	unlockDetached(ctx, ts)
	if err == nil && sem.m.isClosed() {
		// Close released the slot the wait was granted as Close began: report the
		// Close, not a Lock that has already ended.
		l.s.hidden.Store(true)
		unlockDetached(ctx, l)
		err = ErrClosed
	}
	if err != nil {
		return nil, sem.waitError(ctx, err)
	}
	return l, nil
}

// await looks for a slot on behalf of the turnstile's holder: it tries them all, then
// waits on the server for one, a different one each SemaphoreRecheck.
func (sem *Semaphore) await(ctx context.Context) (*Lock, error) {
	ln, err := sem.listen(ctx)
	if err != nil {
		return nil, err
	}
	defer ln.close(true)
	next := rand.IntN(sem.limit)
	for {
		// A slot freed before LISTEN took effect announced itself to nobody: try after it.
		l, err := sem.tryAll(ctx, true)
		if l != nil || err != nil {
			return l, err
		}
		l, err = sem.waitFor(ctx, sem.slots[next], ln)
		if l != nil || err != nil {
			return l, err
		}
		next = (next + 1) % sem.limit
	}
}

// waitFor waits on the server for slot t until SemaphoreRecheck has passed (it returns
// nil, nil) or ctx ends. Meanwhile, whenever a slot is freed (a slot Lock of this process
// ended, or ln heard a NOTIFY), it tries all slots on other connections, keeping its
// place in t's queue. It returns the slot it got; the wait for t, cancelled, may still
// be ending: the slot's Unlock waits for it, and if t is granted, it is released at once.
func (sem *Semaphore) waitFor(ctx context.Context, t target, ln *listener) (*Lock, error) {
	wctx, cancel := context.WithTimeout(ctx, SemaphoreRecheck)
	defer cancel()
	granted := make(chan waitResult, 1)
	go func() {
		l, err := sem.m.attempt(wctx, t, modeLock)
		granted <- waitResult{l, err}
	}()
	heard, stopped := ln.watch(wctx)
	defer func() {
		cancel()
		stopped() // the listener's connection is idle again
	}()
	for {
		wake := sem.wake.channel() // before the tries, so that no release is missed
		select {
		case r := <-granted:
			return sem.waited(ctx, wctx, r.l, r.err)
		case <-wake:
		case <-heard:
		}
		l, err := sem.tryAll(ctx, true)
		if l == nil && err == nil {
			continue
		}
		cancel()
		return sem.abandonWait(ctx, granted, l, err)
	}
}

// waitResult is the outcome of waitFor's wait on the server.
type waitResult struct {
	l   *Lock
	err error
}

// abandonWait ends waitFor once its tries got l, or failed with err, and the wait on the
// server has been cancelled: a slot granted to the wait in the race is released and
// announced, never handed out. On err it returns once the wait has ended: the call holds
// and waits for nothing. With l it returns at once, since the cancel takes a CancelRequest
// to land (a server fork, ~10 ms), and l's Unlock waits for the wait's end: the wait may
// have queued behind l itself (the tries ran before its statement reached the server),
// and freeing l first would hand l's slot to it.
func (sem *Semaphore) abandonWait(ctx context.Context, granted <-chan waitResult, l *Lock, err error) (*Lock, error) {
	end := func() {
		if r := <-granted; r.l != nil { // granted as the wait was cancelled
			r.l.s.hidden.Store(true) // never handed out: no Ended hook
			sem.watchEnd(r.l)
			unlockDetached(context.WithoutCancel(ctx), r.l)
		}
	}
	if err != nil {
		end()
		return nil, err
	}
	ended := make(chan struct{})
	go func() {
		defer close(ended)
		end()
	}()
	l.s.settleFirst(ended)
	return l, nil
}

// settleFirst makes release wait until ended is closed before it lets the lock go: a
// Semaphore's cancelled wait queued behind this slot would otherwise be granted it.
func (p *pin) settleFirst(ended <-chan struct{}) { p.settled.Store(&ended) }

// awaitSettled waits for what settleFirst named, or until ctx ends (the release then
// fails with ctx's error and closes the connection, as it would anyway).
func (p *pin) awaitSettled(ctx context.Context) {
	if ended := p.settled.Load(); ended != nil {
		select {
		case <-*ended:
		case <-ctx.Done():
		}
	}
}

// waited is waitFor's outcome when the wait on the server returned.
func (sem *Semaphore) waited(ctx, wctx context.Context, l *Lock, err error) (*Lock, error) {
	switch {
	case err == nil:
		sem.watchEnd(l)
		return l, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case wctx.Err() != nil:
		return nil, nil // re-check time
	}
	return nil, err
}

// waitError wraps err for Acquire. A ctx that ended is named explicitly, since err may
// carry only the deadline of a re-check round instead.
func (sem *Semaphore) waitError(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return sem.error("acquire", err)
}
