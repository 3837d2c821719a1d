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
// governs the whole call: getting pool connections, the queue and the waits.
//
// Acquire first tries the slots, as TryAcquire does. If all are held it joins the queue:
// waiting callers queue on the turnstile lock (pg_advisory_lock, so in the server's
// first-come-first-served order across processes, and in this Manager's own order within
// the process, as [Manager.Lock] calls do). Only the first in the queue looks for a slot:
// it waits on the server for one slot, where it is first in line, so a caller trying the
// slots cannot take that one from it; when another slot is freed it tries them all while
// keeping its place. It sends no statements while it waits, and tries all slots only when
// a slot is freed or after [SemaphoreRecheck], when it moves on to wait for the next slot.
// So a waiter is not starved: at the latest it gets the slot it waits for when that slot
// is released. A caller arriving while slots are free, or just freed, may be served ahead
// of the queue, as sync.Mutex lets a new caller barge. However many goroutines wait, a
// process uses at most five connections for the waits (two for the turnstile queue, one
// for the slot wait, one to LISTEN, one for the tries) besides the slots it holds, and,
// briefly, one for each goroutine trying the slots on arrival. The pool must have room
// for them: if this Manager's locks pin every connection until ctx ends, the error also
// wraps [ErrPoolExhausted].
//
// The returned [Lock] is an ordinary lock on the slot's name (see [Semaphore]): Unlock it
// to free the slot; Done and Err report its loss. A slot found while waiting on the
// server for another is returned at once, while that wait, cancelled, ends (a
// CancelRequest's time; a slot granted to it in the race is released as soon as it has).
// The slot's Unlock waits for that end before freeing the slot, so once Unlock has
// returned nothing of the call is held or waited for. If ctx ends first, Acquire returns
// an error for which errors.Is(err, ctx.Err()) holds, and holds neither a slot nor the
// turnstile, as [Manager.Lock] guarantees for each. On a closed Manager, or one closed
// while Acquire waits, it returns [ErrClosed].
func (s *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	start := time.Now()
	l, err := s.acquire(ctx)
	return s.report(ctx, false, start, l, err)
}

func (s *Semaphore) acquire(ctx context.Context) (*Lock, error) {
	l, err := s.tryAll(ctx, false)
	switch {
	case l != nil:
		return l, nil
	case err != nil && !errors.Is(err, ErrPoolExhausted):
		return nil, s.waitError(ctx, err)
	}
	ts, err := s.m.attempt(ctx, s.turnstile, modeLock)
	if err != nil {
		return nil, s.waitError(ctx, err)
	}
	l, err = s.await(ctx)
	// The turnstile is let go in every case. If its release cannot be confirmed, Unlock
	// has closed its connection, which frees it on the server: the next waiter goes on.
	unlockDetached(ctx, ts)
	if err == nil && s.m.isClosed() {
		// Close released the slot the wait was granted as Close began: report the
		// Close, not a Lock that has already ended.
		l.s.hidden.Store(true)
		unlockDetached(ctx, l)
		err = ErrClosed
	}
	if err != nil {
		return nil, s.waitError(ctx, err)
	}
	return l, nil
}

// await looks for a slot on behalf of the turnstile's holder: it tries them all, then
// waits on the server for one, a different one each SemaphoreRecheck.
func (s *Semaphore) await(ctx context.Context) (*Lock, error) {
	ln, err := s.listen(ctx)
	if err != nil {
		return nil, err
	}
	defer ln.close(true)
	next := rand.IntN(s.limit)
	for {
		// A slot freed before LISTEN took effect announced itself to nobody: try after it.
		l, err := s.tryAll(ctx, true)
		if l != nil || err != nil {
			return l, err
		}
		l, err = s.waitFor(ctx, s.slots[next], ln)
		if l != nil || err != nil {
			return l, err
		}
		next = (next + 1) % s.limit
	}
}

// waitFor waits on the server for slot t until SemaphoreRecheck has passed (it returns
// nil, nil) or ctx ends. Meanwhile, whenever a slot is freed (a slot Lock of this process
// ended, or ln heard a NOTIFY), it tries all slots on other connections, keeping its
// place in t's queue. It returns the slot it got; the wait for t, cancelled, may still
// be ending: the slot's Unlock waits for it, and if t is granted, it is released at once.
func (s *Semaphore) waitFor(ctx context.Context, t target, ln *listener) (*Lock, error) {
	wctx, cancel := context.WithTimeout(ctx, SemaphoreRecheck)
	defer cancel()
	granted := make(chan waitResult, 1)
	go func() {
		l, err := s.m.attempt(wctx, t, modeLock)
		granted <- waitResult{l, err}
	}()
	heard, stopped := ln.watch(wctx)
	defer func() {
		cancel()
		stopped() // the listener's connection is idle again
	}()
	for {
		wake := s.wake.channel() // before the tries, so that no release is missed
		select {
		case r := <-granted:
			return s.waited(ctx, wctx, r.l, r.err)
		case <-wake:
		case <-heard:
		}
		l, err := s.tryAll(ctx, true)
		if l == nil && err == nil {
			continue
		}
		cancel()
		return s.abandonWait(ctx, granted, l, err)
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
func (s *Semaphore) abandonWait(ctx context.Context, granted <-chan waitResult, l *Lock, err error) (*Lock, error) {
	end := func() {
		if r := <-granted; r.l != nil { // granted as the wait was cancelled
			r.l.s.hidden.Store(true) // never handed out: no Ended hook
			s.watchEnd(r.l)
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
func (s *Semaphore) waited(ctx, wctx context.Context, l *Lock, err error) (*Lock, error) {
	switch {
	case err == nil:
		s.watchEnd(l)
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
func (s *Semaphore) waitError(ctx context.Context, err error) error {
	if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
		err = fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return s.error("acquire", err)
}
