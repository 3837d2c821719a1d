package advisory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
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
// Waiting callers queue on the turnstile lock (pg_advisory_lock, so in the server's
// first-come-first-served order across processes, and in this Manager's own order within
// the process, as [Manager.Lock] calls do): only the first in the queue looks for a slot,
// so a waiter is not starved by later Acquire calls (a [Semaphore.TryAcquire] may still
// take a slot ahead of it). The first waiter tries every slot, then waits on the server
// for one of them; it sends no statements while it waits, and tries all slots again only
// when a slot is freed or after [SemaphoreRecheck]. However many goroutines wait, a
// process uses at most four connections for the waits (two for the turnstile queue, one
// for the slot wait, one to LISTEN) besides the slots it holds.
//
// The returned [Lock] is an ordinary lock on the slot's name (see [Semaphore]): Unlock it
// to free the slot; Done and Err report its loss. If ctx ends first, Acquire returns an
// error for which errors.Is(err, ctx.Err()) holds, and holds neither a slot nor the
// turnstile, as [Manager.Lock] guarantees for each. On a closed Manager, or one closed
// while Acquire waits, it returns [ErrClosed].
func (s *Semaphore) Acquire(ctx context.Context) (*Lock, error) {
	ts, err := s.m.lock(ctx, s.turnstile)
	if err != nil {
		return nil, s.waitError(ctx, err)
	}
	l, err := s.await(ctx)
	// The turnstile is let go in every case. If its release cannot be confirmed, Unlock
	// has closed its connection, which frees it on the server: the next waiter goes on.
	unlockDetached(ctx, ts)
	if err != nil {
		return nil, s.waitError(ctx, err)
	}
	return l, nil
}

// await looks for a slot on behalf of the turnstile's holder: it tries them all, then
// waits for one (a different one each round) until the round's re-check time, a wake-up
// (a slot Lock of this process ended, or a NOTIFY from another process), or ctx's end.
func (s *Semaphore) await(ctx context.Context) (*Lock, error) {
	next := rand.IntN(s.limit)
	var ln *listener
	defer func() {
		if ln != nil {
			ln.close(true)
		}
	}()
	for {
		wake := s.wake.channel() // before the tries, so that no release is missed
		l, err := s.tryAll(ctx, true)
		if l != nil || err != nil {
			return l, err
		}
		if ln == nil {
			// Listen only once a wait is needed, then try again: a slot freed before
			// LISTEN took effect announced itself to nobody.
			if ln, err = s.listen(ctx); err != nil {
				return nil, err
			}
			continue
		}
		l, err = s.waitFor(ctx, s.slots[next], wake, ln)
		if l != nil || err != nil {
			return l, err
		}
		next = (next + 1) % s.limit
	}
}

// waitFor waits on the server for slot t until SemaphoreRecheck has passed, wake is
// closed or ln hears of a freed slot; then it returns (nil, nil). On a grant it returns
// the slot's Lock.
func (s *Semaphore) waitFor(ctx context.Context, t target, wake <-chan struct{}, ln *listener) (*Lock, error) {
	wctx, cancel := context.WithTimeout(ctx, SemaphoreRecheck)
	defer cancel()
	var wakers sync.WaitGroup
	wakers.Go(func() {
		select {
		case <-wake:
			cancel()
		case <-wctx.Done():
		}
	})
	wakers.Go(func() {
		if ln.wait(wctx) {
			cancel()
		}
	})
	l, err := s.m.lock(wctx, t)
	cancel()
	wakers.Wait() // the listener's connection is idle again
	switch {
	case err == nil:
		s.watchEnd(l)
		return l, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case wctx.Err() != nil:
		return nil, nil // re-check time, or woken
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
