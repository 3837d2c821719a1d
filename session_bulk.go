package advisory

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// connFailure marks an error after which the Session's connection is not usable.
type connFailure struct{ err error }

func (c *connFailure) Error() string { return c.err.Error() }
func (c *connFailure) Unwrap() error { return c.err }

// op runs one call's statements on the Session's connection, taken from the watcher and
// handed back after, or ends the Session if the connection failed (a connFailure).
func (s *Session) op(ctx context.Context, run func() error) error {
	p := s.pin
	if err := p.beginOp(); err != nil {
		return err
	}
	err := run()
	var cf *connFailure
	if errors.As(err, &cf) {
		p.lose(cf.err)
		return p.endErr()
	}
	if herr := p.endOp(); herr != nil {
		return herr
	}
	return classify(err)
}

func classify(err error) error {
	if err == nil {
		return nil
	}
	if sqlState(err) == "53200" {
		return fmt.Errorf("%w: %w", ErrLockTableFull, err)
	}
	return err
}

// take locks ts (none held by the Session yet) on its connection, all or nothing, with
// the exactness of Manager.Lock: whatever the outcome, on error none of them is held.
func (s *Session) take(ctx context.Context, ts []target, try bool) error {
	p := s.pin
	p.cancel.SetWaiting(true) // each statement below is a lock wait: see waitRow
	pid, owned, busy, err := p.takeKeysWatched(ctx, ts, try)
	for !try && isSliceEnd(err) && ctx.Err() == nil && !s.isClosing() { // see pin_slices.go
		p.cancel.SetWaiting(false)
		if cerr := p.lease.clearKeys(p, keysOf(ts), false); cerr != nil {
			err = &connFailure{cerr}
			break
		}
		p.cancel.SetWaiting(true)
		pid, owned, busy, err = p.takeKeysWatched(ctx, ts, try)
	}
	p.cancel.SetWaiting(false)
	s.setWaiting(false) // before settle: see setWaiting
	return s.settleTake(ctx, ts, p.cancel.Settle(), pid, owned, busy, err)
}

// takeKeys is sessionLease's: one key by the pin's own statements (see takeOne), many
// in one statement; the result is nil where the statement ran on another client's
// backend, busy the keys a try found held elsewhere.
func (sessionLease) takeKeys(p *pin, ctx context.Context, ts []target, try bool) (pid uint32, owned *bool,
	busy []int64, err error) {
	switch {
	case !try && p.sliced() > 0: // a slice of the wait: see pin_slices.go
		pid, owned, err = p.takeSlice(ctx, ts)
	case len(ts) == 1:
		pid, owned, err = p.takeOne(ctx, ts[0], try)
		if owned != nil && !*owned {
			busy = []int64{int64(ts[0].key)}
		}
	case !try:
		err = p.pc.QueryRow(ctx, lockAllSQL, keysOf(ts), p.token).Scan(&pid, &owned, nil)
	default:
		var taken []int64
		err = p.pc.QueryRow(ctx, tryLockAllSQL, keysOf(ts), p.token).Scan(&pid, &owned, &taken, &busy)
	}
	return pid, owned, busy, err
}

// settleTake decides the outcome of take's statement (err, or the backend pid, whether it
// ran there, and the keys that were busy), after its cancel settled (sent: a CancelRequest
// was sent): nil if every key is held, else an error, with none of them held.
func (s *Session) settleTake(ctx context.Context, ts []target, sent bool, pid uint32, owned *bool,
	busy []int64, err error) error {
	p := s.pin
	if notSent(p.pg, err) && ctx.Err() != nil {
		// pgx refused to start the statement (ctx had ended): the server saw nothing and
		// the connection is as it was.
		return ctx.Err()
	}
	if err == nil {
		err = p.checkOwned(pid, owned)
	}
	if err == nil && ctx.Err() == nil && len(busy) == 0 {
		if kerr := p.lease.keepKeys(p, sent); kerr != nil {
			return &connFailure{kerr}
		}
		return nil
	}
	if err == nil && len(ts) == 1 && len(busy) == 1 && !sent && ctx.Err() == nil {
		// One key, refused by pg_try_advisory_lock, no cancel sent: nothing was taken.
		if kerr := p.lease.keepKeys(p, false); kerr != nil {
			return &connFailure{kerr}
		}
		return &LockedError{Key: ts[0].key, Name: ts[0].name}
	}
	// Not all held by the caller: make sure none is, whatever the server granted.
	if !usable(p.pg, err) || errors.Is(err, ErrPooler) || errors.Is(err, ErrStandby) {
		return &connFailure{err}
	}
	if rerr := p.lease.clearKeys(p, keysOf(ts), sent); rerr != nil {
		return &connFailure{rerr} // unknown what is held: the connection must go
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case err != nil:
		return err
	}
	for _, t := range ts {
		if int64(t.key) == busy[0] {
			return &LockedError{Key: t.key, Name: t.name}
		}
	}
	return &LockedError{Key: Key(busy[0])}
}

func keysOf(ts []target) []int64 {
	keys := make([]int64, len(ts))
	for i, t := range ts {
		keys[i] = int64(t.key)
	}
	return keys
}

// takeOne runs a Session's Lock or TryLock of one key with the statements for the key
// (the bare lock function on a direct connection, see statementsFor) and the pin's
// boxed arguments (see pin.row), and returns the row as pin.row does: the result is nil
// if the statement ran on another client's backend, else whether the lock was granted.
func (p *pin) takeOne(ctx context.Context, t target, try bool) (uint32, *bool, error) {
	st := p.m.texts.statements(p.m.activityName(t.name), false, false, p.st.direct)
	sql := st.lock
	if try {
		sql = st.tryLock
	}
	p.argKey = int64(t.key)
	return p.row(ctx, sql, st.keyInText)
}

// unlockOne releases one key of a Session with the pin's unlock statement. It returns
// whether the statement ran on the connection's own backend. Like the bulk unlock, it
// does not read whether the key was held: the Session's count says it is.
func (p *pin) unlockOne(ctx context.Context, key Key) (owned bool, err error) {
	p.argKey = int64(key)
	_, res, err := p.row(ctx, p.st.unlock, false)
	return err == nil && res != nil, err
}

// notSent reports whether err says a statement was refused before anything was written
// to a connection that is still open: pgx checks ctx before it sends.
func notSent(pg *pgconn.PgConn, err error) bool {
	return err != nil && pgconn.SafeToRetry(err) && !pg.IsClosed()
}

// keepKeys is sessionLease's: a take that got every key, with a cancel sent too (Close
// interrupted it), spends the cancel before Close's release, the next statement, can
// meet it.
func (sessionLease) keepKeys(p *pin, cancelSent bool) error {
	if !cancelSent {
		return nil
	}
	return p.absorbCancel()
}

// clearKeys is sessionLease's: it unlocks those of keys that the backend holds (see
// pin.afterCancel).
func (sessionLease) clearKeys(p *pin, keys []int64, cancelSent bool) error {
	return p.afterCancel(cancelSent, reconcileKeysSQL, keys, p.token)
}

// open is sessionLease's: a Session's connection needs nothing before its first lock.
func (sessionLease) open(*pin, context.Context) error { return nil }

// unlocksOne is sessionLease's: pg_advisory_unlock releases one key.
func (sessionLease) unlocksOne() bool { return true }

// beginOp takes a multi-lock Session's connection back from the watcher for one call.
func (p *pin) beginOp() error {
	p.mu.Lock()
	switch {
	case p.state == stateEnded:
		err := p.err
		p.mu.Unlock()
		return err
	case p.closing || p.state != stateHeld:
		p.mu.Unlock()
		return ErrClosed
	}
	p.state = stateAcquiring // Close interrupts the call's statement, as a Lock wait
	p.mu.Unlock()
	if !p.stopWatch() {
		return p.endErr()
	}
	if p.isClosing() {
		return p.endOp()
	}
	return nil
}

// endOp hands the connection back to the watcher after a call that left it usable. If
// Close has begun meanwhile, it ends the session instead.
func (p *pin) endOp() error {
	if p.hold() {
		return nil
	}
	p.end(false, p.closedLoss()) // a Session's pin: op is "session"
	return ErrClosed
}
