package advisory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"time"
)

// A campaign is one Lead or LeadAs: it takes the lock, drains earlier holders' work and
// announces itself, then runs fn, again after each loss. One rule decides what ends it:
// Lead returns only for errors that retrying cannot mend (see final); every other error
// of a step (a Lock that failed, a drain, a Publish: a cancelled statement, a connection
// error, a session a WithWorkRoles role left running) releases the lock, backs off
// (capped, jittered) and campaigns again, reported on the logger at Warn and to the
// LeadRetry hook. A loss campaigns again at once: the loss itself is reported as any
// loss is (the logger, the Ended hook).
type campaign struct {
	m       *Manager
	name    string
	value   string
	backoff time.Duration
}

// The back-off between failed campaigns: from minBackoff, doubled each time, at most
// maxBackoff, each pause jittered between half and all of it (see jitter).
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 5 * time.Second
)

// elect takes the lock, drains and announces. On success the lock is held; on failure
// it is not, and step names what failed ("lock", "drain", "publish").
func (c *campaign) elect(ctx context.Context) (l *Lock, step string, err error) {
	l, err = c.m.lockFor(ctx, c.name, modeLock, true)
	if err != nil {
		return nil, "lock", err
	}
	if cerr := ctx.Err(); cerr != nil {
		// Granted just as ctx ended: release, do not start fn.
		unlockDetached(ctx, l)
		return nil, "lock", cerr
	}
	if err := drainOrUnlock(ctx, l); err != nil {
		return nil, "drain", err
	}
	if err := l.Publish(ctx, c.value); err != nil {
		if uerr := unlockDetached(ctx, l); errors.Is(uerr, ErrLockLost) && !errors.Is(err, ErrLockLost) {
			err = errors.Join(err, uerr)
		}
		return nil, "publish", err
	}
	return l, "", nil
}

// final returns the error Lead returns for err, a failed step's, or nil if the campaign
// goes on: ctx's end, an invalid name, a closed Manager, a transaction pooler where
// session holdings were asked for, a missing leader table, an invalid use. Those do not
// change by trying again; anything else may (a statement cancelled, a server restarted, a
// work session ended, a privilege granted).
func (c *campaign) final(ctx context.Context, err error) error {
	switch {
	case ctx.Err() != nil && errors.Is(err, ctx.Err()):
		return fmt.Errorf("advisory: lead %s: %w", quote(c.name), ctx.Err())
	case ctx.Err() != nil:
		return fmt.Errorf("advisory: lead %s: %w (last error: %v)", quote(c.name), ctx.Err(), err)
	case errors.Is(err, ErrInvalidKey), errors.Is(err, ErrClosed), errors.Is(err, ErrPooler),
		errors.Is(err, ErrNoLeaderTable), errors.Is(err, ErrInvalidOption):
		return err
	}
	return nil
}

// retry reports a failed step and backs off before the next campaign; a loss campaigns
// again at once. It returns ctx's error if ctx ended first.
func (c *campaign) retry(ctx context.Context, step string, err error) error {
	if errors.Is(err, ErrLockLost) {
		return nil
	}
	pause := jitter(c.backoff)
	c.report(step, err, pause)
	if !sleepCtx(ctx, pause) {
		return fmt.Errorf("advisory: lead %s: %w (last error: %v)", quote(c.name), ctx.Err(), err)
	}
	c.backoff = min(2*c.backoff, maxBackoff)
	return nil
}

// report tells the logger (Warn) and the LeadRetry hook that a campaign failed.
func (c *campaign) report(step string, err error, pause time.Duration) {
	set := &c.m.set
	t, _ := c.m.named(c.name, false) // valid: an invalid name ends the campaign (final)
	logAttrs(set.logger, slog.LevelWarn, "advisory: lead: campaign failed, campaigning again",
		slog.Int64("key", int64(t.key)), slog.String("name", t.name), slog.String("step", step),
		slog.String("error", err.Error()), slog.Duration("backoff", pause))
	if h := set.hooks.LeadRetry; h != nil {
		ev := LockEvent{Name: t.name, Key: t.key, Reason: step, Err: err, Wait: pause}
		callUser(set.logger, "hook LeadRetry", func() { h(ev) })
	}
}

func jitter(d time.Duration) time.Duration {
	return d/2 + rand.N(d/2+1)
}
