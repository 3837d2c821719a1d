package advisory

import (
	"context"
	"encoding/binary"
	"hash/maphash"
	"strings"

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
// pin, the key's gate, the pool's peek, the loss watcher's armer of the time, their
// allocations: 16 µs of client CPU per lock, 89 against 73) was spread thin, each part
// buying a guarantee. So on a direct connection the library prepares these texts itself,
// once per connection, and runs them with pgconn's ExecStatement, the key encoded by hand
// into the pin's buffer and the bool read from the row's bytes: the statements now cost
// less than raw pgx's, which pays for that layer.
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

// A named lock's statements are texts of their own (the name's comment, and on a direct
// connection its key). pgx prepares and caches each text per connection: a text's first
// use on a connection costs a round trip to prepare it, and past the cache's capacity
// (512) texts are evicted and prepared again. A fleet that locks many names from many
// connections then pays two round trips for most locks (measured: 0.26x raw pgx's
// throughput at 1,000 names, against 1.08x for the same locks by key).
//
// So a named statement is sent unprepared, in one round trip, until a connection has run
// it prepareNamedAt times, and prepared from then on. Measured on one connection
// (PostgreSQL 15, loopback): an unprepared lock statement costs 121-130 µs with its
// unlock, a prepared one 115-126 µs, and the prepare itself (a use that prepares) 296-323
// µs: preparing pays for itself only after some 35 further uses on that connection. A
// name locked again and again on a connection (a migration lock, a leader) still runs
// prepared; a name a connection meets a few times is never prepared.
//
// Prepared named texts are also bounded per connection, to half of pgx's statement cache
// (Manager.preparedBudget): a service that locks more names than the cache holds would
// otherwise have pgx evict a prepared name to prepare the next, and prepare the evicted
// one again at its next use (BenchmarkCycleManyNames, 1,000 names on one connection:
// 1.57x the raw floor). Once a connection has prepared its budget, further names stay
// unprepared, and the prepared ones are never evicted by the library's own statements.
// The other half of the cache is left to the unnamed statements and the caller's own
// (BeginFunc and the like).

// prepareNamedAt is the use of a named statement on one connection at which it is
// prepared (see above).
const prepareNamedAt = 32

// seenKey is the connection's CustomData key of the named statements it ran unprepared,
// with how many times (up to prepareAt); preparedKey that of the named statements it
// prepared (never reset: pgx keeps them).
const (
	seenKey     = "advisory.seen"
	preparedKey = "advisory.prepared"
)

// maxSeen bounds the counts per connection; when full they start again (a text forgotten
// counts its uses again).
const maxSeen = 2048

var seenSeed = maphash.MakeSeed()

// unprepared reports whether sql, a lock statement about to run on p's connection, is
// to be sent unprepared: a named statement the connection has run fewer than prepareAt
// times, or one it may not prepare, its budget of prepared names spent. It counts the
// use. Unnamed statements, one text for every key, are always prepared; so is everything
// when the connection's own mode does not cache statements.
func (p *pin) unprepared(sql string) bool {
	if p.m.preparedBudget < 0 || !strings.HasPrefix(sql, commentPrefix) {
		return false
	}
	data := p.pg.CustomData()
	h := maphash.String(seenSeed, sql)
	prepared, _ := data[preparedKey].(map[uint64]struct{})
	if _, ok := prepared[h]; ok {
		return false
	}
	seen, _ := data[seenKey].(map[uint64]int)
	if seen == nil || len(seen) >= maxSeen {
		seen = make(map[uint64]int)
		data[seenKey] = seen
	}
	if uses := seen[h] + 1; uses < p.m.prepareAt || len(prepared) >= p.m.preparedBudget {
		seen[h] = min(uses, p.m.prepareAt)
		return true
	}
	delete(seen, h)
	if prepared == nil {
		prepared = make(map[uint64]struct{})
		data[preparedKey] = prepared
	}
	prepared[h] = struct{}{}
	return false
}

// preparedBudget returns how many named statements a connection of cfg may prepare (see
// Manager.preparedBudget), or -1 when its mode does not prepare and cache statements: then
// the library leaves every statement to that mode. A cache of one statement gives 0: no
// named statement is prepared.
func preparedBudget(cfg *pgx.ConnConfig) int {
	if cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement || cfg.StatementCacheCapacity <= 0 {
		return -1
	}
	return cfg.StatementCacheCapacity / 2
}
