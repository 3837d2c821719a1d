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
func (ss *Session) op(ctx context.Context, run func() error) error {
	s := ss.pin
	if err := s.beginOp(); err != nil {
		return err
	}
	err := run()
	var cf *connFailure
	if errors.As(err, &cf) {
		s.lose(cf.err)
		return s.endErr()
	}
	if herr := s.endOp(); herr != nil {
		return herr
	}
	return classify(err)
}

func classify(err error) error {
	if err == nil {
		return nil
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "53200" {
		return fmt.Errorf("%w: %w", ErrLockTableFull, err)
	}
	return err
}

// Bulk statements: $1 the keys, $2 the connection's token (see ownedBy). Each returns
// whether it ran on the connection's own backend; where it did not, the WHERE clause let
// no key through, so nothing was locked or unlocked. Locks are taken in array order (the
// caller sorts by key).
const (
	lockAllSQL = "SELECT pg_catalog.pg_backend_pid(), " + ownedBy + ", pg_catalog.count(pg_catalog.pg_advisory_lock(k)) " +
		"FROM pg_catalog.unnest($1::bigint[]) AS t(k) WHERE " + ownedBy
	tryLockAllSQL = "SELECT pg_catalog.pg_backend_pid(), " + ownedBy + `,
	coalesce(pg_catalog.array_agg(k) FILTER (WHERE got), '{}'),
	coalesce(pg_catalog.array_agg(k) FILTER (WHERE NOT got), '{}')
FROM (SELECT k, pg_catalog.pg_try_advisory_lock(k) AS got FROM pg_catalog.unnest($1::bigint[]) AS t(k)
	WHERE ` + ownedBy + ") x"
	// reconcileKeysSQL unlocks those of the keys that this backend holds.
	reconcileKeysSQL = "SELECT " + ownedBy + `, pg_catalog.count(pg_catalog.pg_advisory_unlock(k))
FROM pg_catalog.unnest($1::bigint[]) AS t(k)
WHERE ` + ownedBy + ` AND EXISTS (SELECT FROM pg_catalog.pg_locks
	WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
	AND granted AND mode OPERATOR(pg_catalog.=) 'ExclusiveLock' AND objsubid OPERATOR(pg_catalog.=) 1
	AND classid OPERATOR(pg_catalog.=) ((k OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
	AND objid OPERATOR(pg_catalog.=) (k OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid)`
	// unlockAllSQL releases every session lock of the backend (a Session's Close).
	// $1 is the token here.
	unlockAllSQL = "SELECT pg_catalog.pg_backend_pid(), CASE WHEN pg_catalog.current_setting('" + ownerSetting +
		"', true) OPERATOR(pg_catalog.=) $1 THEN pg_catalog.pg_advisory_unlock_all() IS NOT NULL END"
)

// take locks ts (none held by the Session yet) on its connection, all or nothing, with
// the exactness of Manager.Lock: whatever the outcome, on error none of them is held.
func (ss *Session) take(ctx context.Context, ts []target, try bool) error {
	s := ss.pin
	var pid uint32
	var owned *bool
	var busy []int64
	var err error
	s.cancel.SetWaiting(true) // each statement below is a lock wait: see waitRow
	switch {
	case len(ts) == 1:
		pid, owned, err = s.takeOne(ctx, ts[0], try)
		if owned != nil && !*owned {
			busy = []int64{int64(ts[0].key)}
		}
	case !try:
		err = s.pc.QueryRow(ctx, lockAllSQL, keysOf(ts), s.token).Scan(&pid, &owned, nil)
	default:
		var taken []int64
		err = s.pc.QueryRow(ctx, tryLockAllSQL, keysOf(ts), s.token).Scan(&pid, &owned, &taken, &busy)
	}
	s.cancel.SetWaiting(false)
	ss.setWaiting(false) // before settle: see setWaiting
	sent := s.cancel.Settle()
	if notSent(s.pg, err) && ctx.Err() != nil {
		// pgx refused to start the statement (ctx had ended): the server saw nothing and
		// the connection is as it was.
		return ctx.Err()
	}
	if err == nil {
		err = s.checkOwned(pid, owned)
	}
	if err == nil && ctx.Err() == nil && len(busy) == 0 {
		if sent {
			// Granted, but Close interrupted too: spend the cancel before Close's release,
			// the next statement, can meet it.
			if aerr := s.absorbCancel(); aerr != nil {
				return &connFailure{aerr}
			}
		}
		return nil
	}
	if err == nil && len(ts) == 1 && len(busy) == 1 && !sent && ctx.Err() == nil {
		// One key, refused by pg_try_advisory_lock, no cancel sent: nothing was taken.
		return &LockedError{Key: ts[0].key, Name: ts[0].name}
	}
	// Not all held by the caller: make sure none is, whatever the server granted.
	if !usable(s.pg, err) || errors.Is(err, ErrPooler) {
		return &connFailure{err}
	}
	if rerr := s.reconcileKeys(keysOf(ts), sent); rerr != nil {
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
func (s *pin) takeOne(ctx context.Context, t target, try bool) (uint32, *bool, error) {
	st := s.m.texts.statements(t.name, false, false, s.st.direct)
	sql := st.lock
	if try {
		sql = st.tryLock
	}
	s.argKey = int64(t.key)
	return s.row(ctx, sql, st.keyInText)
}

// unlockOne releases one key of a Session with the pin's unlock statement. It returns
// whether the statement ran on the connection's own backend. Like the bulk unlock, it
// does not read whether the key was held: the Session's count says it is.
func (s *pin) unlockOne(ctx context.Context, key Key) (owned bool, err error) {
	s.argKey = int64(key)
	_, res, err := s.row(ctx, s.st.unlock, false)
	return err == nil && res != nil, err
}

// notSent reports whether err says a statement was refused before anything was written
// to a connection that is still open: pgx checks ctx before it sends.
func notSent(pg *pgconn.PgConn, err error) bool {
	return err != nil && pgconn.SafeToRetry(err) && !pg.IsClosed()
}

// reconcileKeys unlocks those of keys that the backend holds (see session.afterCancel).
func (s *pin) reconcileKeys(keys []int64, cancelSent bool) error {
	return s.afterCancel(cancelSent, reconcileKeysSQL, keys, s.token)
}

// beginOp takes a multi-lock Session's connection back from the watcher for one call.
func (s *pin) beginOp() error {
	s.mu.Lock()
	switch {
	case s.state == stateEnded:
		err := s.err
		s.mu.Unlock()
		return err
	case s.closing || s.state != stateHeld:
		s.mu.Unlock()
		return ErrClosed
	}
	s.state = stateAcquiring // Close interrupts the call's statement, as a Lock wait
	s.mu.Unlock()
	if !s.stopWatch() {
		return s.endErr()
	}
	if s.isClosing() {
		return s.endOp()
	}
	return nil
}

// endOp hands the connection back to the watcher after a call that left it usable. If
// Close has begun meanwhile, it ends the session instead.
func (s *pin) endOp() error {
	if s.hold() {
		return nil
	}
	s.end(false, s.closedLoss()) // a Session's pin: op is "session"
	return ErrClosed
}
