package advisory

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5/pgconn"
)

// The lock statements of a pin, and the clean-up that makes their outcome exact.

// lock runs pg_advisory_lock and makes the outcome exact: on return with nil the session
// holds the lock, ctx was not done, and the watcher runs; on any error it does not hold
// the lock, as verified with the server or by closing the connection.
func (s *pin) lock(ctx context.Context) error {
	disarm := s.logWaitLater(ctx)
	pid, owned, err := s.waitRow(ctx, s.st.lock, s.st.keyInText)
	disarm()
	s.setState(stateSettling)
	interrupted := s.cancel.Settle()
	if perr := s.checkBackend(pid, owned, err); perr != nil {
		return perr
	}
	if err == nil && ctx.Err() == nil && s.hold() {
		return nil
	}
	return s.abandon(ctx, err, interrupted)
}

// abandon makes sure a session whose lock statement failed, or returned after ctx ended,
// holds nothing: the grant may have won the race against the cancel (pg_advisory_lock
// then fails with 57014 although the session holds the lock, or succeeds after ctx
// ended), so it asks the server and releases what it says we hold, or closes the
// connection. It returns ctx's error, ErrClosed, or err.
func (s *pin) abandon(ctx context.Context, err error, interrupted bool) error {
	if usable(s.pg, err) {
		if rerr := s.reconcile(s.key, s.st, interrupted); rerr != nil {
			s.discard()
			if errors.Is(rerr, ErrPooler) {
				return rerr
			}
		}
	} else {
		s.discard()
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case s.isClosing():
		return ErrClosed
	}
	return err
}

// tryLock runs pg_try_advisory_lock. On nil the session holds the lock and the watcher
// runs. If another session holds it, it returns a *LockedError and the session is still
// usable and holds nothing. If ctx ends during the round trip, the statement is cancelled
// as lock's is and the outcome made exact the same way (see abandon). On any other error
// the connection is closed (the server frees anything it may hold).
func (s *pin) tryLock(ctx context.Context) error {
	pid, got, err := s.waitRow(ctx, s.st.tryLock, s.st.keyInText)
	s.setState(stateSettling)
	interrupted := s.cancel.Settle()
	if perr := s.checkBackend(pid, got, err); perr != nil {
		return perr
	}
	switch {
	case err != nil || interrupted:
		return s.abandon(ctx, err, interrupted)
	case !*got:
		return &LockedError{Key: s.key, Name: s.name, Pair: s.pair}
	case !s.hold():
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := s.unlock(ctx); err != nil {
			s.discard()
		}
		return ErrClosed
	}
	return nil
}

// reconcile releases the key if the server says this session holds it.
func (s *pin) reconcile(key Key, st statements, cancelSent bool) error {
	return s.afterCancel(cancelSent, st.reconcile, int64(key), s.token, uint32(uint64(key)>>32), uint32(key))
}

// afterCancel runs a clean-up statement, bounded by cleanupTimeout, on a connection whose
// lock statement may have been sent a CancelRequest. That cancel may land on this
// statement instead (57014): then it is run again; the cancel cannot strike twice. The
// statement returns (owned, count): not owned means it ran on another client's backend.
func (s *pin) afterCancel(cancelSent bool, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		var owned bool
		err := s.pc.QueryRow(ctx, sql, args...).Scan(&owned, nil)
		if err == nil && !owned {
			return s.foreignError()
		}
		if err == nil || !cancelSent || attempt == 2 || !isQueryCanceled(err) {
			return err
		}
	}
}

// absorbCancel runs a harmless statement on a connection that a late CancelRequest may
// still strike, so that the cancel is spent (or found to have missed) before the
// connection runs anything that matters.
func (s *pin) absorbCancel() error {
	return s.afterCancel(true, "SELECT true, 0") // afterCancel's (owned, count) shape
}

// usable reports whether the connection is still in step with the server after err: the
// server answered with an ordinary (non-FATAL) error, or there was no error.
func usable(pg *pgconn.PgConn, err error) bool {
	if pg.IsClosed() {
		return false
	}
	if err == nil {
		return true
	}
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Severity != "FATAL" && pgErr.Severity != "PANIC"
}

func isQueryCanceled(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "57014"
}
