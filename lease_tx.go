package advisory

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// txLease holds a pin's lock as one open transaction on its connection: BEGIN and
// pg_advisory_xact_lock in one round trip (see txStatements), idle in transaction while
// held (the watcher reads the socket, as for a session holding), COMMIT to release.
// Transaction-level locks end with the transaction, so whatever goes wrong ends in a
// ROLLBACK or in the connection's end, and either frees the lock: no other client's
// backend can be left holding it, and no ownership token is needed. A transaction
// pooler keeps the client on one server session until the transaction ends, by
// definition.
type txLease struct{}

func (txLease) kind() Holding { return HoldingTransaction }

func (txLease) statements(m *Manager, t target, _ bool) statements {
	return m.texts.tx(m.txBegin, m.activityName(t.name), t.key, t.shared, t.pair)
}

func (txLease) take(p *pin, ctx context.Context, try bool) (uint32, *bool, error) {
	p.cancel.SetWaiting(true)
	defer p.cancel.SetWaiting(false)
	sql := p.st.lock // with a heartbeat, a slice of the wait: its lock_timeout is txBeginSQL's
	if try {
		sql = p.st.tryLock
	}
	return p.txRow(ctx, sql)
}

// check records the holding's backend: the pid the lock statement reported. A lock
// result of NULL (or pid 0, a transaction Session's take) is a standby's (see
// statements_primary.go): the statement took nothing, and the connection, its
// transaction begun, goes.
func (txLease) check(p *pin, pid uint32, got *bool, err error) error {
	if err == nil && (pid == 0 || got == nil) {
		p.discard()
		return standbyError()
	}
	if err == nil && got != nil {
		p.pid, p.vxid = pid, ""
	}
	return nil
}

// clear rolls the transaction back, which releases whatever its lock statement may have
// been granted.
func (txLease) clear(p *pin, cancelSent bool) error {
	if p.pg.TxStatus() == 'I' { // nothing began: the statement was not sent
		return nil
	}
	return p.afterCancelExec(cancelSent, "ROLLBACK")
}

// unlock commits the holding transaction, or with !keep (the Manager's Close, after which
// the holding reports a loss) rolls it back, so that the writes made in it (BeginFunc)
// never commit for a holder told its lock was lost. A holding whose transaction is no
// longer open holds nothing; one whose transaction failed (a statement outside a
// savepoint) still held the lock until now, and COMMIT rolls it back: the lock is
// released either way, and writes made in it are reported lost, or unconfirmed.
func (txLease) unlock(p *pin, ctx context.Context, keep bool) error {
	if p.pg.TxStatus() == 'I' {
		return errNotHeldByServer
	}
	end := "COMMIT"
	if !keep {
		end = "ROLLBACK"
	}
	if keep && p.dirty {
		// This COMMIT is that of the writes BeginFunc left waiting: sent as BeginFunc's own
		// would be (see pin.commit), not under ctx, whose end would make pgx close the
		// connection in the middle of it and leave the commit in doubt; bounded instead.
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
		defer cancel()
	}
	clearWarning(p.pg)
	res, err := p.pg.Exec(ctx, end).ReadAll()
	if err != nil && usable(p.pg, err) && p.pg.TxStatus() == 'I' {
		// The server refused the COMMIT (a deferred constraint, a serialization failure):
		// the transaction ended, rolled back, and the lock with it; the connection is fine.
		return &releasedError{fmt.Errorf("the lock's transaction did not commit: the writes made in it "+
			"(BeginFunc) were rolled back: %w", err)}
	}
	if err != nil {
		return err
	}
	warning := takeWarning(p.pg)
	switch {
	case p.pg.TxStatus() != 'I':
		return errors.New("the holding transaction is still open after " + end)
	case !p.dirty || !keep:
		return nil
	case len(res) == 1 && res[0].CommandTag.String() == "ROLLBACK":
		return &releasedError{errors.New("the lock's transaction had failed, and COMMIT rolled it back: " +
			"the writes made in it (BeginFunc) did not commit")}
	case warning != nil:
		return &releasedError{unconfirmed("the lock's transaction (and the writes of BeginFunc in it)", warning)}
	}
	return nil
}

func (txLease) idle() byte { return 'T' }

// snapshotFree returns args, preceded by pgx's simple-protocol mode when the connection
// is inside a transaction (a transaction holding's): a statement sent in the extended
// protocol leaves its unnamed portal open until the next statement or the transaction's
// end, and the portal keeps its snapshot, so the idle holding would show a backend_xmin
// that makes CREATE INDEX CONCURRENTLY wait for it and holds back vacuum. The simple
// protocol leaves no portal.
func (p *pin) snapshotFree(args ...any) []any {
	if p.pg.TxStatus() == 'I' {
		return args
	}
	return append([]any{pgx.QueryExecModeSimpleProtocol}, args...)
}

// keeps: writes made in the holding transaction belong to the holding that made them,
// which commits them at its Unlock; the transaction cannot pass on to another.
func (txLease) keeps(p *pin) bool { return !p.dirty }

// releasedError is an unlock's error after which the lock is released all the same (its
// transaction ended, the connection is in step): the writes made in the holding
// transaction did not commit, or their commit is unconfirmed.
type releasedError struct{ err error }

func (e *releasedError) Error() string { return e.err.Error() }
func (e *releasedError) Unwrap() error { return e.err }

// txRow runs sql, a simple-protocol Query whose last statement returns one row (the
// backend's pid, and a bool), and returns that row as pin.row does.
func (p *pin) txRow(ctx context.Context, sql string) (uint32, *bool, error) {
	p.rowPID, p.rowOK = 0, pgtype.Bool{}
	err := lastRow(p.pg.Exec(ctx, sql), func(v [][]byte) error {
		if len(v) != 2 {
			return errNotOneRow
		}
		pid, err := strconv.ParseUint(string(v[0]), 10, 32)
		if err != nil {
			return fmt.Errorf("advisory: the lock statement's pid: %w", err)
		}
		p.rowPID, p.rowOK = uint32(pid), pgtype.Bool{Bool: string(v[1]) == "t", Valid: len(v[1]) > 0}
		return nil
	})
	if !p.rowOK.Valid {
		return p.rowPID, nil, err
	}
	return p.rowPID, &p.rowOK.Bool, err
}

// lastRow reads every result of a simple-protocol Query and hands the one row of the last
// statement that returns rows (a SET after it returns none) to row. It returns the first error: the server's, the connection's, or row's.
func lastRow(mrr *pgconn.MultiResultReader, row func([][]byte) error) error {
	var last [][]byte
	rows := 0
	var err error
	for mrr.NextResult() {
		rr := mrr.ResultReader()
		if len(rr.FieldDescriptions()) > 0 { // a statement that returns rows (not a SET)
			last, rows = nil, 0
		}
		for rr.NextRow() {
			rows++
			last = copyRow(rr.Values())
		}
		if _, cerr := rr.Close(); cerr != nil && err == nil {
			err = cerr
		}
	}
	if cerr := mrr.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return err
	case rows != 1:
		return errNotOneRow
	}
	return row(last)
}

func copyRow(v [][]byte) [][]byte {
	out := make([][]byte, len(v))
	for i, b := range v {
		out[i] = append([]byte(nil), b...)
	}
	return out
}
