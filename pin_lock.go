package advisory

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/pgadvisory/advisory/internal/cancelreq"
)

// The lock statements of a pin, and the clean-up that makes their outcome exact.

// lock runs pg_advisory_lock and makes the outcome exact: on return with nil the session
// holds the lock, ctx was not done, and the watcher runs; on any error it does not hold
// the lock, as verified with the server or by closing the connection.
func (p *pin) lock(ctx context.Context) error {
	var disarm func() bool
	if p.m.set.logger != nil {
		disarm = p.logWaitLater(ctx)
	}
	var pid uint32
	var owned *bool
	var err error
	if p.m.set.heartbeat > 0 { // in slices (see pin_slices.go)
		pid, owned, err = p.wait(ctx)
	} else {
		pid, owned, err = p.lease.take(p, ctx, false)
	}
	if disarm != nil {
		disarm()
	}
	p.setState(stateSettling)
	interrupted := p.cancel.Settle()
	if perr := p.lease.check(p, pid, owned, err); perr != nil {
		return perr
	}
	if err == nil && ctx.Err() == nil && p.hold() {
		return nil
	}
	return p.abandon(ctx, err, interrupted)
}

// abandon makes sure a session whose lock statement failed, or returned after ctx ended,
// holds nothing: the grant may have won the race against the cancel (pg_advisory_lock
// then fails with 57014 although the session holds the lock, or succeeds after ctx
// ended), so it asks the server and releases what it says we hold, or closes the
// connection. It returns ctx's error, ErrClosed, or err.
func (p *pin) abandon(ctx context.Context, err error, interrupted bool) error {
	if usable(p.pg, err) {
		if rerr := p.lease.clear(p, interrupted); rerr != nil {
			p.discard()
			if errors.Is(rerr, ErrPooler) {
				return rerr
			}
		}
	} else {
		p.discard()
	}
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case p.isClosing():
		return ErrClosed
	}
	return err
}

// tryLock runs pg_try_advisory_lock. On nil the session holds the lock and the watcher
// runs. If another session holds it, it returns a *LockedError and the session is still
// usable and holds nothing. If ctx ends during the round trip, the statement is cancelled
// as lock's is and the outcome made exact the same way (see abandon). With a heartbeat
// the statement is watched as a wait's slice is: unanswered within the heartbeat and
// beatTimeout, it is interrupted and fails with a silentWait. On any other error the
// connection is closed (the server frees anything it may hold).
func (p *pin) tryLock(ctx context.Context) error {
	var pid uint32
	var got *bool
	var err error
	if p.m.set.heartbeat > 0 { // watched (see pin_slices.go): a frozen server fails the try
		pid, got, err = p.tryWatched(ctx)
	} else {
		pid, got, err = p.lease.take(p, ctx, true)
	}
	p.setState(stateSettling)
	interrupted := p.cancel.Settle()
	if perr := p.lease.check(p, pid, got, err); perr != nil {
		return perr
	}
	switch {
	case err != nil || interrupted:
		return p.abandon(ctx, err, interrupted)
	case !*got:
		return &LockedError{Key: p.key, Name: p.name, Pair: p.pair}
	case !p.hold():
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		if err := p.unlock(ctx, true); err != nil { // just taken: no writes
			p.discard()
		}
		return ErrClosed
	}
	return nil
}

// reconcile releases the key if the server says this session holds it.
func (p *pin) reconcile(key Key, st statements, cancelSent bool) error {
	return p.afterCancel(cancelSent, st.reconcile, int64(key), p.token, uint32(uint64(key)>>32), uint32(key))
}

// afterCancel runs a clean-up statement, bounded by cleanupTimeout, on a connection whose
// lock statement may have been sent a CancelRequest. That cancel may land on this
// statement instead (57014): then it is run again; the cancel cannot strike twice. The
// statement returns (owned, count): not owned means it ran on another client's backend.
func (p *pin) afterCancel(cancelSent bool, sql string, args ...any) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		var owned bool
		err := p.pc.QueryRow(ctx, sql, args...).Scan(&owned, nil)
		if err == nil && !owned {
			return p.foreignError()
		}
		if err == nil || !cancelSent || attempt == 2 || !isQueryCanceled(err) {
			return err
		}
	}
}

// absorbCancel runs a harmless statement on a connection that a late CancelRequest may
// still strike, so that the cancel is spent (or found to have missed) before the
// connection runs anything that matters.
func (p *pin) absorbCancel() error {
	return p.afterCancel(true, "SELECT true, 0") // afterCancel's (owned, count) shape
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
	return sqlState(err) == "57014"
}

// waitRow runs the pin's lock statement, or with try its try statement (see pin.row), as
// a lock wait: cancelling ctx interrupts it with a CancelRequest, which keeps the
// connection usable, instead of a socket deadline, which breaks it. The mark is the
// connection's handler's, set only while the statement runs (the pin's owner runs one
// statement at a time): marking the ctx instead cost an allocation and a ctx.Value walk
// per Lock. A named statement that would be sent unprepared is tried by key first (see
// tryByKeyFirst).
func (p *pin) waitRow(ctx context.Context, try bool) (uint32, *bool, error) {
	p.cancel.SetWaiting(true)
	defer p.cancel.SetWaiting(false)
	sql := p.st.lock
	if try {
		sql = p.st.tryLock
	}
	unprepared := p.unprepared(sql)
	if unprepared && p.st.keyInText && (try || !p.tried && !p.m.taken.skipTry()) {
		return p.tryByKeyFirst(ctx, sql, try)
	}
	return p.rowAs(ctx, sql, p.st.keyInText, unprepared)
}

// handlerKey is where a connection's cancel handler is kept in PgConn.CustomData.
const handlerKey = "advisory.cancelHandler"

// newCancelHandler builds the ctxwatch.Handler of every connection of a Manager's pool: a
// cancelreq.Handler, whose fallback deadline is the cancel grace (see WithCancelGrace).
//
// The policy is the root's: which statements a cancelled ctx interrupts with a
// CancelRequest. A lock wait (see waitRow) is, so that the caller can ask the server, on
// the same session, whether the grant won the race against the cancel (see
// pin.reconcile). So is every statement of a caller's transaction on a held lock's
// connection (BeginFunc; see pin.beginTx), so that a cancelled statement fails the
// transaction but keeps the connection, and with it the lock. Any other statement gets
// an immediate socket deadline, after which the session discards the connection.
func newCancelHandler(grace time.Duration) func(*pgconn.PgConn) ctxwatch.Handler {
	return func(pg *pgconn.PgConn) ctxwatch.Handler {
		h := cancelreq.New(pg, grace)
		pg.CustomData()[handlerKey] = h
		return h
	}
}

func handlerOf(pg *pgconn.PgConn) *cancelreq.Handler {
	h, _ := pg.CustomData()[handlerKey].(*cancelreq.Handler)
	return h
}
