package advisory

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// guardedTx is the pgx.Tx fenced work gets: the lease's transaction (pgx's, or a
// savepointTx), with every statement read before it is sent (see fencedRefusal). A
// refused statement is not sent, returns an error wrapping ErrFencedStatement, and marks
// the transaction failed, as a statement the server refused would: fn's work is then
// rolled back when fn returns, whatever fn returns. Savepoints (Begin) are guarded too.
// Statements sent through Conn() are not read: see runTx's check when fn returns.
type guardedTx struct {
	pgx.Tx
	refused *error // the first refusal, shared with the savepoints begun on it
}

func guard(tx pgx.Tx) *guardedTx { return &guardedTx{Tx: tx, refused: new(error)} }

// check returns the refusal of sql, and records the first.
func (t *guardedTx) check(sql string) error {
	err := fencedRefusal(sql)
	if err != nil && *t.refused == nil {
		*t.refused = err
	}
	return err
}

// failed returns the first refusal, if any: the work must not commit.
func (t *guardedTx) failed() error { return *t.refused }

// Begin starts a savepoint, guarded as its parent is.
func (t *guardedTx) Begin(ctx context.Context) (pgx.Tx, error) {
	tx, err := t.Tx.Begin(ctx)
	if err != nil {
		return nil, err
	}
	return &guardedTx{Tx: tx, refused: t.refused}, nil
}

// Exec runs sql unless fenced work may not send it.
func (t *guardedTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	if err := t.check(sql); err != nil {
		return pgconn.CommandTag{}, err
	}
	return t.Tx.Exec(ctx, sql, args...)
}

// Query runs sql unless fenced work may not send it.
func (t *guardedTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	if err := t.check(sql); err != nil {
		return &refusedRows{err: err}, err
	}
	return t.Tx.Query(ctx, sql, args...)
}

// QueryRow runs sql unless fenced work may not send it.
func (t *guardedTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	if err := t.check(sql); err != nil {
		return &refusedRows{err: err}
	}
	return t.Tx.QueryRow(ctx, sql, args...)
}

// Prepare prepares sql unless fenced work may not send it.
func (t *guardedTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	if err := t.check(sql); err != nil {
		return nil, err
	}
	return t.Tx.Prepare(ctx, name, sql)
}

// SendBatch sends b unless one of its statements may not be sent by fenced work; then
// nothing of it is sent.
func (t *guardedTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	for _, q := range b.QueuedQueries {
		if err := t.check(q.SQL); err != nil {
			return &refusedBatch{err: err, tx: t}
		}
	}
	return t.Tx.SendBatch(ctx, b)
}

// refusedRows is the pgx.Rows and pgx.Row of a refused statement: no rows, its error.
type refusedRows struct{ err error }

func (r *refusedRows) Close()                                       {}
func (r *refusedRows) Err() error                                   { return r.err }
func (r *refusedRows) CommandTag() pgconn.CommandTag                { return pgconn.CommandTag{} }
func (r *refusedRows) FieldDescriptions() []pgconn.FieldDescription { return nil }
func (r *refusedRows) Next() bool                                   { return false }
func (r *refusedRows) Scan(...any) error                            { return r.err }
func (r *refusedRows) Values() ([]any, error)                       { return nil, r.err }
func (r *refusedRows) RawValues() [][]byte                          { return nil }
func (r *refusedRows) Conn() *pgx.Conn                              { return nil }
func (r *refusedRows) TypeMap() *pgtype.Map                         { return nil }

// refusedBatch is the pgx.BatchResults of a refused batch: each result is its error.
type refusedBatch struct {
	err error
	tx  pgx.Tx
}

func (b *refusedBatch) Exec() (pgconn.CommandTag, error) { return pgconn.CommandTag{}, b.err }
func (b *refusedBatch) Query() (pgx.Rows, error)         { return &refusedRows{err: b.err}, b.err }
func (b *refusedBatch) QueryRow() pgx.Row                { return &refusedRows{err: b.err} }
func (b *refusedBatch) Close() error                     { return b.err }
func (b *refusedBatch) Tx() pgx.Tx                       { return b.tx }

// errWorkEndedTx is the cause of a loss seen as fn's work having ended the holding's
// transaction itself, through statements the guard could not read (tx.Conn()).
var errWorkEndedTx = errors.New("fenced work ended the lock's transaction itself (a COMMIT or ROLLBACK sent " +
	"through tx.Conn()), which freed the lock on the server")
