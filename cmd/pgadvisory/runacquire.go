package main

import (
	"context"
	"errors"
	"time"

	"github.com/pgadvisory/advisory"
)

// How `pgadvisory run` takes its lock: at once or waiting, telling who holds it while it
// waits.

// acquire takes the lock as the flags say, reporting who holds it while it waits. ctx
// ends the wait (a signal).
func (r *runner) acquire(ctx context.Context, m *advisory.Manager) (*advisory.Lock, error) {
	if r.noWait {
		l, err := r.try(ctx, m)
		if errors.Is(err, advisory.ErrLocked) {
			desc, _ := r.holders(ctx, m)
			return nil, fail(r.conflict, "%s is %s; not waiting (--no-wait)", r.lock.label(), desc)
		}
		return r.acquiredAtOnce(l, err)
	}
	wctx, stop := context.WithCancel(ctx)
	if r.wait > 0 {
		wctx, stop = context.WithTimeout(ctx, r.wait)
	}
	defer stop()
	// One try first: if the lock is free it is taken at once; if it is held, whoever
	// waits is told by whom right away, not a second later.
	l, err := r.try(wctx, m)
	if !errors.Is(err, advisory.ErrLocked) {
		if errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil {
			desc, _ := r.holders(ctx, m)
			return nil, fail(r.conflict, "gave up on %s after %v (--wait): it is %s", r.lock.label(), r.wait, desc)
		}
		return r.acquiredAtOnce(l, err)
	}
	done := make(chan lockResult, 1)
	go func() {
		l, err := r.waitOut(wctx, m) // rides out a lost connection (runrewait.go)
		done <- lockResult{l, err}
	}()
	return r.awaitLock(ctx, m, done)
}

// acquiredAtOnce ends a try: it says that the lock was taken (unless --quiet), as a call
// that had to wait says it after its wait, so that a log shows when every holding began.
func (r *runner) acquiredAtOnce(l *advisory.Lock, err error) (*advisory.Lock, error) {
	if err == nil && !r.quiet {
		r.say("acquired %s without waiting", r.lock.label())
	}
	return l, r.lockFailure(err)
}

// try and lockCall take the lock by name when it was given by name, so that its holders
// and status show the name; by key otherwise. Both take the same key.
func (r *runner) try(ctx context.Context, m *advisory.Manager) (*advisory.Lock, error) {
	switch {
	case r.slots > 0:
		return r.trySlot(ctx, m)
	case r.lock.name != "" && r.shared:
		return m.TryLockShared(ctx, r.lock.name)
	case r.lock.name != "":
		return m.TryLock(ctx, r.lock.name)
	case r.shared:
		return m.TryLockKeyShared(ctx, r.lock.key)
	}
	return m.TryLockKey(ctx, r.lock.key)
}

func (r *runner) lockCall(ctx context.Context, m *advisory.Manager) (*advisory.Lock, error) {
	switch {
	case r.slots > 0:
		return r.sem.Acquire(ctx) // made by trySlot, which acquire always calls first
	case r.lock.name != "" && r.shared:
		return m.LockShared(ctx, r.lock.name)
	case r.lock.name != "":
		return m.Lock(ctx, r.lock.name)
	case r.shared:
		return m.LockKeyShared(ctx, r.lock.key)
	}
	return m.LockKey(ctx, r.lock.key)
}

type lockResult struct {
	l   *advisory.Lock
	err error
}

// reportEvery is how often run repeats who holds the lock while the holders stay the same.
const reportEvery = 10 * time.Second

// awaitLock waits for the Lock call in done, reporting the holders when they change and
// every reportEvery while they do not. It always waits for the call to return.
func (r *runner) awaitLock(ctx context.Context, m *advisory.Manager, done <-chan lockResult) (*advisory.Lock, error) {
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var lastWho string // the holders' identity last reported
	var lastAt time.Time
	if !r.quiet {
		desc, who := r.holders(ctx, m)
		r.say("waiting for %s: it is %s", r.lock.label(), desc)
		lastWho, lastAt = who, time.Now()
	}
	for {
		select {
		case res := <-done:
			if errors.Is(res.err, context.DeadlineExceeded) {
				desc, _ := r.holders(ctx, m)
				return nil, fail(r.conflict, "gave up on %s after %v (--wait): it is %s", r.lock.label(), r.wait, desc)
			}
			if res.err == nil && !r.quiet && !lastAt.IsZero() {
				r.say("acquired %s after waiting %s", r.lock.label(), age(time.Since(start)))
			}
			return res.l, r.lockFailure(res.err)
		case <-tick.C:
			if r.quiet || r.cut.Load() { // reconnecting says so itself
				continue
			}
			desc, who := r.holders(ctx, m)
			if ctx.Err() == nil && (who != lastWho || time.Since(lastAt) >= reportEvery) {
				r.say("waiting for %s for %s: it is %s", r.lock.label(), age(time.Since(start)), desc)
				lastWho, lastAt = who, time.Now()
			}
		}
	}
}

// holders describes who holds the lock, and returns their identity (see holderIdentity).
func (r *runner) holders(ctx context.Context, m *advisory.Manager) (desc, who string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hs, err := r.holdersOf(ctx, m)
	if err != nil {
		return "held by an unknown session (" + err.Error() + ")", "unknown"
	}
	return r.describe(hs), holderIdentity(hs)
}

func (r *runner) lockFailure(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, advisory.ErrPooler):
		return poolerError("run", "the address pgadvisory connected to", err)
	}
	return fail(exitUnavailable, "%v", err)
}
