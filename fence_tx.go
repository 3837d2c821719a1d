package advisory

import (
	"context"

	"github.com/jackc/pgx/v5"
)

// BeginFunc runs fn in a transaction on the connection that holds the lock and commits it
// if fn returns nil: a fenced write, which can commit only while the lock's session, and
// so the lock, exists. Writes elsewhere need [Lock.Token]. docs/fencing.md has the full
// contract.
//
// It blocks until fn has returned and the transaction has ended. ctx governs the
// transaction: if it ends before fn runs, fn is not run; if it ends while fn runs, the
// transaction is rolled back; the lock is kept either way, unless the server does not
// answer within the cancel grace ([WithCancelGrace]) after ctx ends: then the
// connection is closed and the lock lost, and nothing of fn's commits. Once fn has returned nil with
// ctx live, COMMIT is sent and not interrupted. It returns nil if the commit is confirmed,
// an error wrapping [ErrCommitUnconfirmed] if the server could not confirm it, fn's error
// (rolled back), or an error wrapping [ErrLockLost] (nothing committed) or [ErrNotHeld]. A
// panic in fn rolls back, keeps the lock and goes on. tx refuses, unsent, statements that
// would end the transaction, change the session or release advisory locks
// ([ErrFencedStatement]); such a refusal, or a failed statement fn ignored
// (pgx.ErrTxCommitRollback), rolls fn's work back and keeps the lock. fn must not keep tx,
// send such statements through tx.Conn(), or call this Lock's Unlock, Token or
// BeginFunc. On a re-entered Lock it runs
// on the holding's connection, and fails at once with [ErrNotReentrant] while a
// BeginFunc of the holding runs fn (it would wait for that transaction).
func (l *Lock) BeginFunc(ctx context.Context, fn func(pgx.Tx) error) error {
	return l.BeginTxFunc(ctx, pgx.TxOptions{}, fn)
}

// BeginTxFunc is [Lock.BeginFunc] with transaction options (isolation level, access mode,
// deferrable), as pgx.BeginTxFunc takes them.
func (l *Lock) BeginTxFunc(ctx context.Context, opts pgx.TxOptions, fn func(pgx.Tx) error) error {
	if fn == nil {
		panic("advisory: BeginFunc with a nil function")
	}
	s, err := l.own("begin a transaction on", true)
	if err != nil {
		return err
	}
	return s.runTx(ctx, opts, fn)
}

// DoTx takes the lock with the given name (blocking as [Manager.Lock] does), drains
// earlier holders' work as [Manager.Do] does, runs fn in a fenced transaction on the
// lock's connection (see [Lock.BeginFunc]), and unlocks. fn's ctx is derived from ctx and
// is also cancelled if the lock is lost; the transaction then does not commit, and DoTx's
// error wraps [ErrLockLost].
//
// It returns nil if and only if the transaction committed, confirmed (even if the lock
// ends before the unlock: the commit happened while it was held; on a transaction
// holding the commit is the unlock's, see [WithHolding]); an error wrapping
// [ErrCommitUnconfirmed] says it committed without the confirmation synchronous_commit
// promises (see [Lock.BeginFunc]). Otherwise it returns the error of Lock, of fn (the
// transaction was rolled back) or of the commit, joined with a loss reported by the
// unlock. The unlock is bounded by 5 s of its own, as in [Manager.Do]. If fn panics, the
// transaction is rolled back and the lock released before the panic goes on.
//
// Re-entering a holding its ctx carries (see [Manager]), DoTx runs fn's transaction on
// the holding's connection; on a transaction holding, its writes then commit with the
// holding's release, and nil means they joined that transaction. Inside a transaction of
// the holding (another DoTx's fn, a BeginFunc) it fails at once with [ErrNotReentrant]:
// use that transaction.
func (m *Manager) DoTx(ctx context.Context, name string, fn func(ctx context.Context, tx pgx.Tx) error) error {
	if fn == nil {
		panic("advisory: DoTx with a nil function")
	}
	l, err := m.lockFor(ctx, name, modeLock, true)
	if err != nil {
		return err
	}
	if err := drainOrUnlock(ctx, l); err != nil {
		return err
	}
	txErr, uerr := runThenUnlock(ctx, l, func(ctx context.Context) error {
		return l.BeginFunc(ctx, func(tx pgx.Tx) error { return fn(ctx, tx) })
	})
	if txErr == nil && (uerr == nil || l.s.lease.kind() == HoldingSession) {
		// Committed while held. The unlock cannot undo that, and if it failed the
		// connection was closed, which freed the lock: report the commit. On a
		// transaction holding the unlock's COMMIT is the transaction's: its error is
		// DoTx's (see txLease.unlock).
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
