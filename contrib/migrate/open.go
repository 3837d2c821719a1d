package advmigrate

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"fmt"

	"github.com/golang-migrate/migrate/v4/database"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/advisory"
)

// Open opens golang-migrate's pgx/v5 driver ("pgx5") on dsn with cfg (nil: the driver's
// defaults) and wraps it as [Wrap] does, with the lock name taken with m and opts. It is
// pgx.WithInstance followed by Wrap, made safe behind a transaction pooler, where Wrap
// refuses a driver built by golang-migrate's own constructor: that constructor takes a
// session pg_advisory_lock to create its version table and releases it with a later
// statement, which a transaction pooler may send to another server connection. The lock
// then stays on a pooled server connection, and a later constructor whose statement lands
// anywhere else waits for it forever (migrate's LockTimeout does not cover constructors).
//
// When m goes through a transaction pooler ([advisory.Bounds].TransactionPooler), Open
//   - runs the driver's constructor holding the advisory lock name (taken with m,
//     waiting at most ctx and the wrapper's wait, [WithWait]), so that replicas create
//     the version table one at a time, and answers the constructor's own
//     pg_advisory_lock and pg_advisory_unlock itself, without sending them;
//   - opens the driver's connections in pgx's QueryExecModeExec unless dsn chooses
//     another mode than pgx's default cache_statement, whose named prepared statements a
//     transaction pooler carries to other clients' server connections ("prepared
//     statement ... already exists").
//
// On a direct connection (or a session pooler) it does neither: the constructor locks as
// golang-migrate wrote it. dsn is a pgx connection string (golang-migrate's x- URL
// parameters are cfg's fields here); it may differ from m's. ctx bounds the wait for the
// lock; the constructor's own statements take no ctx, as in golang-migrate. On error
// nothing is held or left open. An invalid option returns an error wrapping
// [advisory.ErrInvalidOption]. The Driver owns its *sql.DB: migrate's Close closes it. It
// panics if m is nil.
func Open(ctx context.Context, m *advisory.Manager, dsn, name string, cfg *migratepgx.Config, opts ...Option) (*Driver, error) {
	if m == nil {
		panic("advmigrate: Open with a nil Manager")
	}
	o, err := parseOptions(opts)
	if err != nil {
		return nil, err
	}
	if cfg == nil {
		cfg = &migratepgx.Config{}
	}
	pooled := m.Bounds().TransactionPooler
	cc, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("advmigrate: the driver's connection string: %w", err)
	}
	if pooled && cc.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		cc.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	var conn driver.Connector = stdlib.GetConnector(*cc)
	if pooled {
		conn = locklessConnector{conn}
	}
	db := sql.OpenDB(conn)
	inner, err := construct(ctx, m, name, o, db, cfg, pooled)
	if err != nil {
		db.Close()
		return nil, err
	}
	return &Driver{inner: inner, m: m, name: name, o: o}, nil
}

// construct runs golang-migrate's constructor on db; behind a transaction pooler, under
// the advisory lock name (the constructor's own lock statements are not sent there).
func construct(ctx context.Context, m *advisory.Manager, name string, o options, db *sql.DB,
	cfg *migratepgx.Config, pooled bool) (database.Driver, error) {
	if pooled {
		wctx, cancel := context.WithTimeout(ctx, o.wait)
		defer cancel()
		l, err := m.Lock(wctx, name)
		if err != nil {
			return nil, fmt.Errorf("advmigrate: lock %q to create the version table: %w", name, err)
		}
		defer release(l)
	}
	d, err := migratepgx.WithInstance(db, cfg)
	if err != nil {
		return nil, fmt.Errorf("advmigrate: open golang-migrate's pgx/v5 driver: %w", err)
	}
	return d, nil
}

// The statements of golang-migrate's pgx/v5 driver's own lock (its Lock and Unlock, which
// its constructor runs; through the wrapper nothing else does).
const (
	driverLockSQL   = "SELECT pg_advisory_lock($1)"
	driverUnlockSQL = "SELECT pg_advisory_unlock($1)"
)

// locklessConnector opens pgx stdlib connections that answer the driver's own lock
// statements without sending them (see Open).
type locklessConnector struct{ driver.Connector }

// Connect opens a connection of the wrapped connector.
func (c locklessConnector) Connect(ctx context.Context) (driver.Conn, error) {
	dc, err := c.Connector.Connect(ctx)
	if err != nil {
		return nil, err
	}
	if sc, ok := dc.(*stdlib.Conn); ok {
		return locklessConn{sc}, nil
	}
	return dc, nil
}

// locklessConn is a pgx stdlib connection (every optional interface of database/sql's
// it has, it keeps) whose ExecContext answers the driver's lock statements itself.
type locklessConn struct{ *stdlib.Conn }

// ExecContext runs query, unless it is one of the driver's lock statements, which it
// answers as done.
func (c locklessConn) ExecContext(ctx context.Context, query string, args []driver.NamedValue) (driver.Result, error) {
	if query == driverLockSQL || query == driverUnlockSQL {
		return driver.RowsAffected(0), nil
	}
	return c.Conn.ExecContext(ctx, query, args)
}
