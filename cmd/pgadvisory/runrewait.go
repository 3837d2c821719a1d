package main

import (
	"context"
	"errors"
	"time"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/connstr"
)

// How run's wait rides out a lost connection (issue 44 item 7): a failover, a server
// restart, a pooler restart or pg_terminate_backend of the waiting backend ends the
// library's Lock call with a connection error. Nothing was held yet, so nothing is lost:
// run reconnects as a start-up does (the same backoff, for --connect-timeout counted
// from the loss) and waits again. A holding that is lost still stops the command (76).

// waitOut waits for the lock (lockCall) until it is taken, ctx ends (a signal, --wait) or
// the connection is lost and not regained within --connect-timeout. After a loss it says
// so on stderr, and each try while reconnecting may take the lock at once.
func (r *runner) waitOut(ctx context.Context, m *advisory.Manager) (*advisory.Lock, error) {
	for {
		l, err := r.lockCall(ctx, m)
		if err == nil || ctx.Err() != nil || !r.waitCut(err) {
			return l, err
		}
		l, err = r.rewait(ctx, m, err)
		if l != nil || err != nil {
			return l, err
		}
	}
}

// waitCut says whether err, which ended a wait while ctx was alive, is a lost connection
// that a reconnect may cure (ErrLockLost: the wait's session ended, though it held
// nothing yet): not the Manager's Close, not a refusal time will not fix.
func (r *runner) waitCut(err error) bool {
	if errors.Is(err, advisory.ErrClosed) || r.conn.attempts().timeout == 0 {
		return false
	}
	_, transient := notUpYet(err)
	return transient || errors.Is(err, advisory.ErrLockLost)
}

// rewait reconnects after the wait's connection was lost (err): it tries the lock at
// once, with start-up's backoff, until a try reaches the server. It returns the lock if
// a try took it, nil and nil if the lock is still held (wait again), or the exit-69 error
// when --connect-timeout ran out or the server refused for good. ctx ending returns
// ctx's error (a lock a try took is returned even then).
func (r *runner) rewait(ctx context.Context, m *advisory.Manager, err error) (*advisory.Lock, error) {
	cfg, cerr := r.conn.config("")
	if cerr != nil {
		return nil, cerr
	}
	password := cfg.ConnConfig.Password
	reason, _ := notUpYet(err)
	if reason == "" {
		reason = connectReason(err, password)
	}
	c := r.conn.attempts()
	r.say("lost the connection while waiting for %s: %s; reconnecting for up to %v (--connect-timeout)",
		r.lock.label(), connstr.Scrub(reason, []string{password}), c.timeout)
	r.cut.Store(true)
	defer r.cut.Store(false)
	start := time.Now()
	var l *advisory.Lock
	gaveUp, err := c.retry(ctx, target(cfg), password, func(actx context.Context) error {
		var terr error
		l, terr = r.try(actx, m)
		if errors.Is(terr, advisory.ErrLocked) {
			return nil // the server answered: the lock is still held
		}
		return terr
	})
	switch {
	case l != nil: // taken by a try (if a signal came too, run releases it)
		return l, nil
	case ctx.Err() != nil:
		return nil, ctx.Err()
	case err != nil:
		return nil, c.connectFailure(&cfg.ConnConfig.Config, err, gaveUp)
	}
	r.say("reconnected %s after the loss; waiting for %s again", age(time.Since(start)), r.lock.label())
	return nil, nil
}
