package advisory

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"time"
)

// enterCall waits for the Session's turn. It fails, changing nothing, if ctx ends first
// (an error wrapping ctx.Err()), if the Session ended (its end error) or if Close began
// (ErrNotHeld). After nil the caller must call leaveCall.
func (s *Session) enterCall(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	select {
	case s.turn <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("advisory: queued behind another call on this session: %w", ctx.Err())
	case <-s.closing:
		return s.endedError()
	case <-s.pin.done:
		return s.endedError()
	}
	err := s.pin.endErr() // lost or closed: say so before anything else
	if err == nil && s.isClosing() {
		err = errSessionClosed
	}
	if err == nil {
		err = ctx.Err()
	}
	if err != nil {
		s.leaveCall()
	}
	return err
}

func (s *Session) leaveCall() { <-s.turn }

// endedError is the error of a call on a Session that has ended or is closing: the same
// as Err once it has ended (a loss stays a loss after Close), else ErrNotHeld.
func (s *Session) endedError() error {
	if err := s.pin.endErr(); err != nil {
		return err
	}
	return errSessionClosed
}

func (s *Session) isClosing() bool {
	select {
	case <-s.closing:
		return true
	default:
		return false
	}
}

// lockNames is Lock, TryLock, LockAll and TryLockAll: it validates the names, takes
// those the Session does not hold yet in one statement, and counts every name once more.
func (s *Session) lockNames(ctx context.Context, names []string, try bool) error {
	ts := make([]target, 0, len(names))
	for _, n := range names {
		t, err := s.m.named(n, false)
		if err != nil {
			return err
		}
		ts = append(ts, t)
	}
	if err := s.enterCall(ctx); err != nil {
		return err
	}
	defer s.leaveCall()
	fresh := s.fresh(ts)
	if n := s.count(); n+len(fresh) > s.m.set.sessionCap {
		return fmt.Errorf("%w: %d held, %d more asked for, the cap is %d", ErrTooManyLocks, n, len(fresh), s.m.set.sessionCap)
	}
	if len(fresh) > 0 {
		if err := s.op(ctx, func() error { return s.takeInterruptibly(ctx, fresh, try) }); err != nil {
			return err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range ts {
		s.held[t]++
	}
	s.peak = max(s.peak, len(s.held))
	return nil
}

// takeInterruptibly is take, as a wait that Close may interrupt (see setWaiting).
func (s *Session) takeInterruptibly(ctx context.Context, ts []target, try bool) error {
	if !s.setWaiting(true) {
		return errSessionClosed
	}
	err := s.take(ctx, ts, try)
	var cf *connFailure
	if err != nil && !errors.As(err, &cf) && !errors.Is(err, ctx.Err()) && s.isClosing() {
		// Interrupted by Close (take released whatever it got): say so, also when ctx has
		// ended since take looked at it, which would otherwise leave the server's answer
		// to the interrupt (57014) as the error.
		return errSessionClosed
	}
	return err
}

// setWaiting marks the Session's lock statement as running (Close interrupts it) or not.
// Marking it running fails once Close has begun. take unmarks it as soon as the statement
// returns and before it settles the cancel handler, as pin.lock does with its state, so
// that an interrupt from Close is always one that Settle sees.
func (s *Session) setWaiting(on bool) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if on && s.isClosing() {
		return false
	}
	s.waiting = on
	return true
}

func (s *Session) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.held)
}

// fresh returns the distinct targets of ts the Session does not hold yet, in key order.
func (s *Session) fresh(ts []target) []target {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(ts) == 1 { // Lock and TryLock: no set, no sort
		if s.held[ts[0]] > 0 {
			return nil
		}
		return ts
	}
	seen := make(map[target]bool, len(ts))
	var out []target
	for _, t := range ts {
		if s.held[t] == 0 && !seen[t] {
			seen[t] = true
			out = append(out, t)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].key < out[j].key })
	return out
}

// unlockKey releases the lock t on the server, on the Session's connection, within
// cleanupTimeout whatever ctx; a connFailure if it cannot be confirmed.
func (s *Session) unlockKey(ctx context.Context, t target) error {
	// The bound is a socket deadline, under a ctx that cannot be cancelled (so that pgx
	// does not watch it): a timeout ctx would cost a timer and a context watcher per call.
	// On the deadline the read fails and pgx closes the connection, as on a timeout ctx.
	conn := s.pin.pg.Conn()
	conn.SetDeadline(time.Now().Add(cleanupTimeout))
	owned, err := s.pin.unlockOne(context.WithoutCancel(ctx), t.key)
	conn.SetDeadline(time.Time{})
	if err == nil && !owned {
		err = s.pin.foreignError()
	}
	if err != nil {
		return &connFailure{err} // unknown whether it is still held: the connection must go
	}
	return nil
}
