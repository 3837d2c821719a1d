package advisory

import (
	"strconv"
	"strings"
)

// The statements of a transaction holding. Each goes by the simple query protocol, with
// its key written in as a literal: nothing is prepared, so nothing can go missing when a
// transaction pooler gives the next transaction another server session (PgBouncer before
// 1.21 tracks no prepared statement), and the transaction's first statements travel in
// the same round trip as its lock. As everywhere (see statements.go), every server
// function is named with pg_catalog.

// txBeginSQL is the start of every holding transaction: BEGIN, then the settings the
// holding needs for its own length only, as SET LOCAL statements (SET LOCAL ends with the
// transaction, so nothing leaks to the next client of a pooled server session). They
// clear the timeouts that would end the wait or the idle holding behind the caller's back
// (lock_timeout, statement_timeout, idle_in_transaction_session_timeout, and from
// PostgreSQL 17 transaction_timeout), and set the server end's keepalive and, from 14,
// client_connection_check_interval, on the server session the holding runs on: behind a
// pooler that is the pooler's connection, so a cut between pooler and server frees the
// lock within the server-side bound of docs/keepalive.md.
//
// Every holding sets them all again: behind a transaction pooler each transaction may run
// on another server session, whose settings no earlier check could have proven. They come
// before the lock's own statement, not in it: statement_timeout and
// client_connection_check_interval are armed as a statement starts, so only settings made
// by an earlier statement of the same message govern the wait. SET LOCAL statements, not
// one SELECT of set_config(..., true): the same effect, and through PgBouncer 1.18 the
// cycle costs about 0.06x of raw's less (issue 47; docs/benchmarks.md), a utility
// statement needing no plan, snapshot or row sent back.
func txBeginSQL(set *settings, serverVersion int) string {
	var b strings.Builder
	b.WriteString("BEGIN; ")
	for _, kv := range txSettings(set, serverVersion) {
		// Names and values are the library's own (see applySQL): no quoting needed.
		b.WriteString("SET LOCAL " + kv[0] + " = '" + kv[1] + "'; ")
	}
	return b.String()
}

// txSettings are the settings of a holding transaction (see txBeginSQL): a session
// holding's (serverSettings) but idle_session_timeout, which never applies inside a
// transaction, and from PostgreSQL 17 transaction_timeout. With a heartbeat, lock_timeout
// is the wait's slice (see pin_slices.go), which fn's savepoint clears (see beginFn).
func txSettings(set *settings, serverVersion int) [][2]string {
	var out [][2]string
	for _, kv := range serverSettings(set, serverVersion) {
		switch {
		case kv[0] == "idle_session_timeout":
			continue
		case kv[0] == "lock_timeout" && set.heartbeat > 0:
			kv[1] = sliceMillis(set.heartbeat) // a wait in slices (pin_slices.go); BeginFunc clears it
		}
		out = append(out, kv)
	}
	if serverVersion >= 170000 {
		out = append(out, [2]string{"transaction_timeout", "0"})
	}
	return out
}

// txStatements are the statements of one lock held by transaction: lock and tryLock begin
// the holding transaction and take the lock in it, in one round trip, and return the
// backend's pid and the lock function's result (the pid is the holding's: behind a pooler
// it is known only once the transaction runs). On a standby they take nothing and return
// NULL for the lock (see statements_primary.go): pg_is_in_recovery() is asked once, as
// the statement is parsed and planned at each use (it carries its key). A name's comment comes first, as in
// statementsFor, so that Holders reads it. Unlock is the transaction's COMMIT (see
// txLease.unlock), which needs no text of the lock.
func txStatements(begin, name string, key Key, shared, pair bool) statements {
	fn := "pg_catalog.pg_advisory_xact_lock"
	if shared {
		fn += "_shared"
	}
	try := "pg_catalog.pg_try_" + fn[len("pg_catalog.pg_"):]
	args := "(" + keyLiteral(key) + ")"
	if pair {
		pp := pairOf(key)
		args = "(" + strconv.Itoa(int(pp.Class)) + ", " + strconv.Itoa(int(pp.Object)) + ")"
	}
	start := begin + "SELECT pg_catalog.pg_backend_pid(), CASE WHEN " + onPrimary + " THEN "
	if name != "" {
		start = nameComment(name) + start
	}
	return statements{lock: start + fn + args + " IS NOT NULL END", tryLock: start + try + args + " END", keyInText: true}
}

// txTextKey is what a transaction holding's texts depend on, beside the Manager's BEGIN
// (one per Manager): the key is written into them.
type txTextKey struct {
	name         string
	key          Key
	shared, pair bool
}

// tx returns txStatements(begin, name, key, shared, pair), from the cache if it is
// there, under the bounds of the session holding's texts (see textCache): each text
// carries BEGIN and the holding's settings, about 500 bytes, and building the two of a
// Lock was half of the bytes a pooled cycle allocated (issue 47). begin must be the
// Manager's own (m.txBegin), the same for every call.
func (c *textCache) tx(begin, name string, key Key, shared, pair bool) statements {
	if name == "" || len(name) > maxCachedNameLen {
		return txStatements(begin, name, key, shared, pair)
	}
	return cachedTexts(&c.mu, &c.txm, txTextKey{name, key, shared, pair}, func() statements {
		return txStatements(begin, name, key, shared, pair)
	})
}
