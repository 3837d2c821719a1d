package advisory

import (
	"context"
	"encoding/binary"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The key's own statements on a direct connection, run below pgx's query layer.
//
// Every lock cycle runs two statements that take one bigint and return one bool: the lock
// (or try) and the unlock. Through pgx.Conn.QueryRow each one also pays for pgx's generic
// machinery: the statement cache's lookup, the arguments' encoding plans, a Rows value and
// its scan plans. Profiled at fleet scale (20 replicas × 50 goroutines on 2 CPUs), the
// statements cost the library what they cost raw pgx, and what the library added (the
// pin, the key's gate, the pool's peek, the armer, their allocations: 16 µs of client CPU
// per lock, 89 against 73) was spread thin, each part buying a guarantee. So on a direct
// connection the library prepares these texts itself, once per connection, and runs them
// with pgconn's ExecStatement, the key encoded by hand into the pin's buffer and the bool
// read from the row's bytes: the statements now cost less than raw pgx's, which pays
// for that layer.
//
// The protocol is the one pgx's default mode speaks (Parse and Describe once, then Bind
// and Execute), so the server does the same work. It is used only where that default is
// in force (QueryExecModeCacheStatement: see preparedBudget) and no QueryTracer is
// configured, so a caller who chose another mode, or who traces every query, sees every
// statement go through pgx as before. A proxied connection keeps pgx's path too: there
// the statements carry the ownership check (see ownedBy) and a prepared statement may
// meet another client's (see isPoolerSymptom).

// ownPreparedKey is the connection's CustomData key of the key statements it prepared: a
// map from the statement text to its description.
const ownPreparedKey = "advisory.ownPrepared"

// ownNames names the statements ownRow runs, by text: the direct base statements (see
// baseStatements), a fixed set of twelve.
var ownNames = func() map[string]string {
	m := make(map[string]string)
	for i, shared := range []bool{false, true} {
		for j, pair := range []bool{false, true} {
			st, mode := baseStatements[1][i][j], ""
			if shared {
				mode += "_shared"
			}
			if pair {
				mode += "_pair"
			}
			m[st.lock] = "advisory_lock" + mode
			m[st.tryLock] = "advisory_try_lock" + mode
			m[st.unlock] = "advisory_unlock" + mode
		}
	}
	return m
}()

// useOwnPrepared reports whether a Manager built on cfg runs its direct key statements
// through ownRow.
func useOwnPrepared(cfg *pgx.ConnConfig) bool {
	return preparedBudget(cfg) >= 0 && cfg.Tracer == nil
}

// ownRow runs sql, one of ownNames' statements (each takes the key as $1 and returns one bool), and
// sets p.rowOK. The first use on a connection prepares it (one more round trip, as pgx's
// cache does). A statement deallocated since (DEALLOCATE ALL in a caller's transaction on
// the held connection) fails at Bind, before it runs: it is prepared again and run once
// more. Errors are the server's or the connection's, as QueryRow returns them.
func (p *pin) ownRow(ctx context.Context, sql string) error {
	for again := false; ; again = true {
		sd, err := p.ownStatement(ctx, sql)
		if err != nil {
			return err
		}
		binary.BigEndian.PutUint64(p.keyBuf[:], uint64(p.keyArg()))
		rr := p.pg.ExecStatement(ctx, sd, p.params[:], binaryFormat[:], binaryFormat[:])
		for rr.NextRow() {
			if v := rr.Values(); len(v) == 1 && len(v[0]) == 1 {
				p.rowOK.Bool, p.rowOK.Valid = v[0][0] != 0, true
			}
		}
		_, err = rr.Close()
		if !again && err != nil && sqlState(err) == "26000" {
			p.forgetOwn(sql)
			continue
		}
		return err
	}
}

// forgetOwn drops sql from the statements p's connection has prepared for ownRow (the
// server no longer has it: 26000, invalid_sql_statement_name), so that its next use
// prepares it again.
func (p *pin) forgetOwn(sql string) {
	stmts, _ := p.pg.CustomData()[ownPreparedKey].(map[string]*pgconn.StatementDescription)
	delete(stmts, sql)
}

// ownStatement returns sql's description on p's connection, prepared now if it is not yet.
func (p *pin) ownStatement(ctx context.Context, sql string) (*pgconn.StatementDescription, error) {
	data := p.pg.CustomData()
	stmts, _ := data[ownPreparedKey].(map[string]*pgconn.StatementDescription)
	if sd := stmts[sql]; sd != nil {
		return sd, nil
	}
	sd, err := p.pg.Prepare(ctx, ownNames[sql], sql, nil)
	if err != nil {
		return nil, err
	}
	if stmts == nil {
		stmts = make(map[string]*pgconn.StatementDescription)
		data[ownPreparedKey] = stmts
	}
	stmts[sql] = sd
	return sd, nil
}

// binaryFormat is the format codes of ownRow's one parameter and one result: binary.
var binaryFormat = [1]int16{pgx.BinaryFormatCode}

// keyArg returns the key of the pin's next statement: its own, or a Session's current
// call's (see pin.args).
func (p *pin) keyArg() int64 {
	if k, ok := p.args[0].(*int64); ok {
		return *k
	}
	k, _ := p.args[0].(int64)
	return k
}
