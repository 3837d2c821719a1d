package advisory

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Statements beside a transaction holding. A fencing token must be durable the moment it
// is returned, and a leader's announcement seen at once; the holding's own transaction
// commits only at Unlock (and a NOTIFY in it would wait for that too). So they run on
// another connection of the Manager's pool, each committing on its own, on one condition
// checked in the same statement: that the holding transaction holds the lock now, as
// pg_locks shows it. The holding is named by its backend's pid and its transaction's
// virtual id (virtualtransaction): the pid alone names a server session, which a
// transaction pooler hands to other clients, and a later transaction of another holder of
// the same key may run on it; the virtual id is that transaction's only. The caller has
// borrowed the holding's connection (see onHeld), so nothing else runs on it meanwhile.

// heldByTx is the condition "the transaction $pid, $vxid holds the lock exclusively":
// $classid, $objid and $subid are its pg_locks key, each parameter given by number.
func heldByTx(pid, vxid, classid, objid, subid string) string {
	return `EXISTS (SELECT FROM pg_catalog.pg_locks l
  WHERE l.pid OPERATOR(pg_catalog.=) ` + pid + `::integer
    AND l.virtualtransaction OPERATOR(pg_catalog.=) ` + vxid + `::pg_catalog.text
    AND l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
    AND l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
    AND l.database OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_database
      WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
    AND l.classid OPERATOR(pg_catalog.=) ` + classid + ` AND l.objid OPERATOR(pg_catalog.=) ` + objid + `
    AND l.objsubid OPERATOR(pg_catalog.=) ` + subid + `)`
}

// tokenBesideSQL is tokenSQL for a transaction holding: $1 the key, $2 the holding's
// pid, $3 whether the key is a pair, $4 its virtual transaction id, $5, $6, $7 the
// lock's pg_locks classid, objid and objsubid.
var tokenBesideSQL = strings.Replace(tokenSQL, "WHERE "+ownedBy, "WHERE "+heldByTx("$2", "$4", "$5", "$6", "$7"), 1)

// leaderBeside turns a leader statement (announceSQL, or publishSQL with its table) into
// its form beside a transaction holding: $2, the ownership token there, is the holding's
// pid here, and vxid names the parameter of its virtual transaction id, added last.
func leaderBeside(sql, vxid string) string {
	sql = strings.Replace(sql, " AND "+ownedBy, "", 1)
	sql = strings.ReplaceAll(sql, "pg_catalog.pg_backend_pid()", "$2::integer")
	return strings.Replace(sql, "AND l.granted", "AND l.granted AND l.virtualtransaction OPERATOR(pg_catalog.=) "+
		vxid+"::pg_catalog.text", 1)
}

func (txLease) bumpToken(p *pin, ctx context.Context) (int64, error) {
	var tok int64
	classid, objid, subid := pgLocksKey(p.key, p.pair)
	err := p.beside(ctx, func(c *pgxpool.Conn, vxid string) error {
		clearWarning(c.Conn().PgConn())
		err := c.QueryRow(ctx, fmt.Sprintf(tokenBesideSQL, p.m.set.fenceTable), int64(p.key), int32(p.pid),
			p.pair, vxid, classid, objid, subid).Scan(&tok)
		if n := takeWarning(c.Conn().PgConn()); err == nil && n != nil {
			err = unconfirmed("the fencing token's commit", n)
		}
		if errors.Is(err, pgx.ErrNoRows) {
			err = p.notHeldBeside(vxid)
		}
		return err
	})
	return tok, err
}

func (txLease) announce(p *pin, ctx context.Context, sql string, args []any) (int, error) {
	var n int
	err := p.beside(ctx, func(c *pgxpool.Conn, vxid string) error {
		args := append([]any{args[0], int32(p.pid)}, args[2:]...) // the pid for the token
		beside := leaderBeside(sql, fmt.Sprintf("$%d", len(args)+1))
		clearWarning(c.Conn().PgConn())
		var err error
		n, err = countRows(c.Query(ctx, beside, append(args, vxid)...))
		if w := takeWarning(c.Conn().PgConn()); err == nil && w != nil {
			err = unconfirmed("the announcement's commit", w)
		}
		if err == nil && n == 0 {
			err = p.notHeldBeside(vxid)
		}
		return err
	})
	return n, err
}

// withdraw is txLease's: beside the holding, committed before its own transaction ends.
func (txLease) withdraw(p *pin, ctx context.Context, sql string) error {
	c, err := p.m.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer c.Release()
	_, err = c.Exec(ctx, sql, int64(p.key), p.pair, int32(p.pid))
	return err
}

// vxidSQL reads the holding transaction's virtual id, on the holding's connection.
const vxidSQL = "SELECT virtualtransaction FROM pg_catalog.pg_locks WHERE locktype " +
	"OPERATOR(pg_catalog.=) 'virtualxid' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()"

// beside runs stmt on another connection of the Manager's pool, with the holding
// transaction's virtual id (read once, on the holding's connection, which the caller has
// borrowed). ctx governs getting the connection and stmt. As on the holding's own
// connection (see pin.beginTx), ctx ending during stmt asks the server to cancel it
// instead of breaking the connection: a statement that had committed by then (a token
// taken) reports its result, never ctx's error. A connection a cancel was sent on may
// still meet it at its next statement, so it is closed rather than given back.
func (p *pin) beside(ctx context.Context, stmt func(c *pgxpool.Conn, vxid string) error) error {
	if p.vxid == "" {
		// Not under ctx: a cancel would fail the holding's transaction, and so lose the
		// lock; the read never waits on the server (as BEGIN, see pin.begin). Named, as
		// every statement on the holding (see pin.named): it stays the holding's last
		// statement in pg_stat_activity until the next.
		err := p.pc.QueryRow(context.WithoutCancel(ctx), p.named(vxidSQL), p.snapshotFree()...).Scan(&p.vxid)
		if err != nil {
			return fmt.Errorf("advisory: read the lock's transaction id: %w", err)
		}
	}
	c, err := p.m.pool.Acquire(ctx)
	if err != nil {
		return p.m.acquireError(ctx, err)
	}
	defer c.Release()
	h := handlerOf(c.Conn().PgConn())
	h.SetGentle(true)
	err = stmt(c, p.vxid)
	h.SetGentle(false)
	if h.Settle() {
		cctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		c.Conn().Close(cctx)
		cancel()
	}
	return err
}

// notHeldBeside is the error of a statement beside the holding that found it not
// holding the lock: the holding was lost, and this process has not heard of it yet.
func (p *pin) notHeldBeside(vxid string) error {
	return p.lossError(fmt.Errorf("the server shows the lock's transaction (backend pid %d, transaction %s) "+
		"not holding it", p.pid, vxid), "")
}
