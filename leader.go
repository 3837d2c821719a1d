package advisory

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// A Leader is who holds a lock exclusively, as [Manager.Leader] and [Manager.Observe]
// report it.
type Leader struct {
	// Name is the name asked about ("" for a raw key); Key its key.
	Name string
	Key  Key
	// Elected reports that a session holds the lock exclusively; Holder is that session
	// (its PID, BackendStart, ApplicationName, ClientAddr: see [Holder]). When false,
	// nobody leads and Holder is the zero Holder.
	Elected bool
	Holder  Holder
	// Value is what the holder published with [Lock.Publish] during this holding (the
	// value of [PublishValue] for [Manager.Lead]), and Published when; "" and the zero
	// time if it published none, if the Manager has no [WithLeaderTable], or if the
	// follower cannot see the holder's session start (another role's session, without
	// pg_read_all_stats): a value is shown only when it is provably this holding's.
	Value     string
	Published time.Time
	// Waiting is how many sessions wait for the lock on the server: the candidates queued
	// to lead next. Calls queued inside a process behind one of its own (see
	// [WithLocalHandoff] and docs/locking.md) are not counted.
	Waiting int
	// Err is set, and the rest is zero, when the leader could not be read (the server is
	// unreachable, say): the leader is unknown. Observe keeps trying.
	Err error
}

// Leader returns who leads name (in the Manager's namespace, if it has one) now: the
// session that holds its lock exclusively, if any, and what it published. It blocks for
// one or two queries on pool connections, governed by ctx. An invalid name returns an
// error wrapping [ErrInvalidKey]; a missing leader table, [ErrNoLeaderTable].
func (m *Manager) Leader(ctx context.Context, name string) (Leader, error) {
	t, err := m.named(name, false)
	if err != nil {
		return Leader{}, err
	}
	return m.readLeader(ctx, t, name)
}

// LeaderKey is [Manager.Leader] for a raw 64-bit key.
func (m *Manager) LeaderKey(ctx context.Context, key Key) (Leader, error) {
	return m.readLeader(ctx, target{key: key}, "")
}

// Observe reports who leads name, and each change, on the returned channel: first the
// leader now, then a new [Leader] each time the holding session, its published value or
// the number of waiting candidates changes, until ctx ends or the Manager closes; then
// the channel is closed. A reader that falls behind misses intermediate values but always
// gets the latest. It does not block; the reads run on a goroutine, on pool connections
// (one LISTEN connection per Manager, shared by its observers, and one query per read).
//
// How fast: a holder that announces itself ([Lock.Publish]; [Manager.Lead] and
// pgadvisory run do it) is seen as soon as its notification arrives, and so is its Unlock;
// a leader that ends without a word (killed, cut off) is seen when its successor
// announces itself, or, with no successor or a holder that never announces, at the next
// re-check ([WithLeaderRecheck], default 1 s). docs/locking.md has the measured figures.
// A read that fails is reported once as a Leader with Err set, and retried.
//
// When ctx ends, the channel is closed with no further value. When the Manager closes,
// it is closed after at most one more value: a Leader whose Err wraps [ErrClosed], sent
// when the Close overtook a read (whether it comes depends on when the Close lands).
//
// An invalid name returns an error wrapping [ErrInvalidKey]; a closed Manager
// [ErrClosed].
func (m *Manager) Observe(ctx context.Context, name string) (<-chan Leader, error) {
	t, err := m.named(name, false)
	if err != nil {
		return nil, err
	}
	t.name = name
	return m.observeTarget(ctx, t)
}

// ObserveKey is [Manager.Observe] for a raw 64-bit key.
func (m *Manager) ObserveKey(ctx context.Context, key Key) (<-chan Leader, error) {
	return m.observeTarget(ctx, target{key: key})
}

func (m *Manager) observeTarget(ctx context.Context, t target) (<-chan Leader, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	out := make(chan Leader, 1)
	go m.observe(ctx, t, out)
	return out, nil
}

// Publish announces l's holder as the lock's leader to observers ([Manager.Observe]), and
// stores value for them to read, if value is not "" (it needs [WithLeaderTable]). It runs
// one statement on the lock's connection, governed by ctx, that does both only if that
// session holds the lock exclusively, and commits (it waits for the commit as the
// server's synchronous_commit says). Once published, the lock announces its Unlock too.
// Publish again to change the value. On failure the lock is kept and nothing was
// published: an error wraps [ErrNoLeaderTable], [ErrCommitUnconfirmed], ctx's error, or the
// lock's end ([ErrLockLost], [ErrNotHeld]); a shared lock cannot lead ([ErrInvalidOption]).
// A re-entered Lock publishes for its holding, whose Unlock announces the release
// ([ErrNotReentrant] at once while a BeginFunc of the holding runs fn).
func (l *Lock) Publish(ctx context.Context, value string) error {
	s, err := l.own("publish", true)
	if err != nil {
		return err
	}
	if h := &s.handle; h != l { // re-entered: the holding publishes, and announces its own release
		return h.Publish(ctx, value)
	}
	switch {
	case s.shared:
		return &opError{"publish", s.describe(), fmt.Errorf("%w: a shared lock does not lead", ErrInvalidOption)}
	case value != "" && s.m.set.leaderTable == "":
		return &opError{"publish", s.describe(), fmt.Errorf("%w: the Manager has no WithLeaderTable", ErrNoLeaderTable)}
	}
	if err := s.publish(ctx, value != "", value); err != nil {
		return &opError{"publish", s.describe(), err}
	}
	l.announced.Store(true)
	return nil
}

// Lead makes this process a leader candidate for the given name. It blocks in
// [Manager.Lock] until it holds the lock (it is leader), drains earlier holders' work as
// [Manager.Do] does, announces itself to observers ([Lock.Publish]), then runs fn with a
// context that is cancelled if the lock is lost (context.Cause then wraps [ErrLockLost]).
// When leadership is lost, Lead waits for fn to return and campaigns again at once.
//
// Lead returns only when ctx ends (an error wrapping ctx.Err(); fn's context is cancelled
// and fn has returned), when fn returns while still leader (fn's error, nil included; the
// lock is released first), or on an error retrying cannot mend: an invalid name
// ([ErrInvalidKey]), a closed Manager ([ErrClosed]), session holdings asked for behind a
// transaction pooler ([ErrPooler]), a missing leader table ([ErrNoLeaderTable]). Any
// other error of a campaign (a Lock that failed, a drain, a Publish: a cancelled
// statement, a connection error, a server restart, [ErrWorkNotDrained]) releases the
// lock, backs off (capped and jittered, 100 ms to 5 s) and campaigns again; each is
// reported on the logger at Warn and to [Hooks].LeadRetry. fn must return once its
// context is cancelled. Whenever Lead returns, or fn panics (the lock is released before
// the panic goes on up the stack), the lock is not held.
func (m *Manager) Lead(ctx context.Context, name string, fn func(ctx context.Context) error) error {
	return m.LeadAs(ctx, name, "", fn)
}

// LeadAs is [Manager.Lead] that publishes value ([Lock.Publish]) each time it becomes
// leader, before fn runs, for followers to read with [Manager.Leader] or
// [Manager.Observe]: its address, its version. A value needs [WithLeaderTable] (else
// LeadAs returns [ErrNoLeaderTable] at once); "" publishes none.
func (m *Manager) LeadAs(ctx context.Context, name, value string, fn func(ctx context.Context) error) error {
	if fn == nil {
		panic("advisory: Lead with a nil function")
	}
	if value != "" && m.set.leaderTable == "" {
		return fmt.Errorf("%w: lead %s with a value to publish", ErrNoLeaderTable, quote(name))
	}
	c := &campaign{m: m, name: name, value: value, backoff: minBackoff}
	for {
		l, step, err := c.elect(ctx)
		if err != nil {
			if ferr := c.final(ctx, err); ferr != nil {
				return ferr
			}
			if rerr := c.retry(ctx, step, err); rerr != nil {
				return rerr
			}
			continue
		}
		c.backoff = minBackoff
		if lost, err := leadOnce(ctx, l, fn); !lost {
			return err
		}
	}
}

// leadOnce runs fn while l is held. It reports whether the lock was lost (then fn's error
// is dropped: the caller campaigns again); otherwise it releases the lock and returns fn's
// error.
func leadOnce(ctx context.Context, l *Lock, fn func(ctx context.Context) error) (lost bool, err error) {
	fnErr, uerr := runThenUnlock(ctx, l, fn)
	switch {
	case ctx.Err() != nil:
		return false, fmt.Errorf("advisory: lead %s: %w", quote(l.Name()), ctx.Err())
	case errors.Is(uerr, ErrLockLost):
		return true, nil
	}
	return false, fnErr
}

// sleepCtx sleeps d, or less if ctx ends first; it reports whether it slept the whole d.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
