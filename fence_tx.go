package advisory

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// BeginFunc runs fn in a transaction on the connection that holds the lock, and commits
// it if fn returns nil: a fenced write. A session-level advisory lock is released only by
// an unlock or by the end of its session, so a commit on that session can only succeed
// while the lock is held: a holder that stalled and lost its lock (its session was
// terminated, the network failed) cannot commit afterwards, whatever it believes. Writes
// to anything but this database are not fenced by it: see [Lock.Token] and
// docs/fencing.md.
//
// It blocks until fn has returned and the transaction has ended. ctx governs the
// transaction, and fn should pass it to its own statements: if ctx has ended before the
// call, or ends during BEGIN, fn is not run, ctx's error is returned and the lock is kept
// (BEGIN itself is not interrupted); a cancelled statement of fn fails the transaction,
// which is rolled back, but the connection, and so the lock, is kept (the server is asked
// to cancel, as for a Lock wait; only if it does not answer within the grace period is
// the connection closed, which frees the lock). If ctx ends while fn runs, the
// transaction is rolled back, not committed. Once fn has returned nil with ctx live, the
// COMMIT is sent and not interrupted by ctx (5 s bound its round trip, as for BEGIN). It
// waits for another BeginFunc running on the same Lock, bounded by ctx; Unlock waits for
// it too.
//
// It returns nil if the transaction committed, confirmed as synchronous_commit promises;
// an error wrapping [ErrCommitUnconfirmed] if it committed on the server but the server
// warned that it could not confirm it (its wait for a synchronous standby was cancelled:
// after a failover the commit may be gone). If fn returns an error, the transaction
// is rolled back and that error returned. If the lock was lost before the call or is lost
// before the commit, nothing is committed and the error wraps [ErrLockLost]; the same if
// the commit fails because the session is gone. (As with any commit whose reply is lost,
// a commit can succeed on the server while the reply never arrives; it then still
// happened while the lock was held.) Loss detection keeps working while fn runs: Done is
// closed as soon as the connection hangs up, and every later statement of fn fails. After
// Unlock, BeginFunc returns an error wrapping [ErrNotHeld].
//
// If fn panics (or calls runtime.Goexit), the transaction is rolled back, the lock stays
// held, and the panic goes on. fn must not keep tx, start a transaction of its own on
// tx.Conn(), or unlock the lock through it; nor call the Lock's Unlock, Token or
// BeginFunc, which wait for fn to return (take the token before BeginFunc).
func (l *Lock) BeginFunc(ctx context.Context, fn func(pgx.Tx) error) error {
	return l.BeginTxFunc(ctx, pgx.TxOptions{}, fn)
}

// BeginTxFunc is [Lock.BeginFunc] with transaction options (isolation level, access mode,
// deferrable), as pgx.BeginTxFunc takes them.
func (l *Lock) BeginTxFunc(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	if fn == nil {
		panic("advisory: BeginFunc with a nil function")
	}
	return l.s.runTx(ctx, opts, fn)
}

// DoTx takes the lock with the given name (blocking as [Manager.Lock] does), drains
// earlier holders' work as [Manager.Do] does, runs fn in a fenced transaction on the
// lock's connection (see [Lock.BeginFunc]), and unlocks. fn's ctx is derived from ctx and
// is also cancelled if the lock is lost; the transaction then does not commit, and DoTx's
// error wraps [ErrLockLost].
//
// It returns nil if and only if the transaction committed, confirmed (even if the lock
// ends before the unlock: the commit happened while it was held); an error wrapping
// [ErrCommitUnconfirmed] says it committed without the confirmation synchronous_commit
// promises (see [Lock.BeginFunc]). Otherwise it returns the error of Lock, of fn (the
// transaction was rolled back) or of the commit, joined with a loss reported by the
// unlock. The unlock is bounded by 5 s of its own, as in [Manager.Do]. If fn panics, the
// transaction is rolled back and the lock released before the panic goes on.
func (m *Manager) DoTx(ctx context.Context, name string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if fn == nil {
		panic("advisory: DoTx with a nil function")
	}
	l, err := m.Lock(ctx, name)
	if err != nil {
		return err
	}
	if err := drainOrUnlock(ctx, l); err != nil {
		return err
	}
	txErr, uerr := runThenUnlock(ctx, l, func(ctx context.Context) error {
		return l.BeginFunc(ctx, func(tx pgx.Tx) error { return fn(ctx, tx) })
	})
	if txErr == nil {
		// Committed while held. The unlock cannot undo that, and if it failed the
		// connection was closed, which freed the lock: report the commit.
		return nil
	}
	return doResult(txErr, uerr)
}

// BeginFunc runs fn in a transaction on the Session's connection, fenced by every lock
// the Session holds (see [Lock.BeginFunc] for what that guarantees and how ctx, errors
// and panics are handled). It is one call of the Session: it waits for the Session's
// other calls, bounded by ctx, and they wait for it; the Session's Close waits until fn
// has returned. If the Session is lost before the commit, nothing is committed and the
// error wraps [ErrLockLost].
func (s *Session) BeginFunc(ctx context.Context, fn func(pgx.Tx) error) error {
	return s.BeginTxFunc(ctx, pgx.TxOptions{}, fn)
}

// BeginTxFunc is [Session.BeginFunc] with transaction options.
func (s *Session) BeginTxFunc(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	if fn == nil {
		panic("advisory: BeginFunc with a nil function")
	}
	if err := s.enterCall(ctx); err != nil {
		return err
	}
	defer s.leaveCall()
	return s.pin.runTx(ctx, opts, fn)
}
