package advisory

import (
	"strconv"
	"strings"
)

// statements are the SQL a session runs for one lock of one mode (exclusive or shared).
type statements struct {
	lock, tryLock string // may carry the name comment (see nameComment)
	unlock        string // $1: the key
	reconcile     string // $1: the key, $2: classid, $3: objid
}

func statementsFor(name string, shared, pair bool) statements {
	suffix, mode := "", "ExclusiveLock"
	if shared {
		suffix, mode = "_shared", "ShareLock"
	}
	// Every statement takes the key as one bigint, $1; the two-int4 form splits it here.
	args, subid := "($1)", "1"
	if pair {
		args, subid = "(($1::bigint >> 32)::int4, ($1::bigint::bit(32))::int4)", "2"
	}
	// lock, tryLock and unlock also return pg_backend_pid(): a different backend than the
	// connection's own means a transaction-pooling proxy (see checkBackend).
	st := statements{
		lock:    "SELECT pg_backend_pid(), pg_advisory_lock" + suffix + args,
		tryLock: "SELECT pg_backend_pid(), pg_try_advisory_lock" + suffix + args,
		unlock:  "SELECT pg_backend_pid(), pg_advisory_unlock" + suffix + args,
		// Unlock the key if, and only if, this backend holds it: unlike a bare unlock it
		// leaves no WARNING in the server log when it does not.
		reconcile: "SELECT pg_advisory_unlock" + suffix + args + " FROM pg_locks WHERE locktype = 'advisory'" +
			" AND pid = pg_backend_pid() AND granted AND mode = '" + mode + "'" +
			" AND classid = $2 AND objid = $3 AND objsubid = " + subid,
	}
	// With a name the statement text differs per name. pgx prepares and caches each text
	// per connection (statement_cache_capacity, 512 by default): the first lock of a name on
	// a connection costs one more round trip; later ones cost nothing extra. Sent unprepared
	// instead, every lock would be parsed and planned again: 15-20% slower here.
	if name != "" {
		c := nameComment(name)
		st.lock, st.tryLock = c+st.lock, c+st.tryLock
	}
	return st
}

// commentPrefix starts the comment that records a lock's name in the statement text, so
// that other sessions can read it from pg_stat_activity.query (see [Manager.Holders]).
const commentPrefix = "/* advisory lock "

// nameComment returns the comment naming the lock. The name is Go-quoted (ASCII, no
// newlines) with every '*' escaped, so no name can end the comment early or open a nested
// one (neither "*/" nor "/*" can appear without a '*').
func nameComment(name string) string {
	q := strings.ReplaceAll(strconv.QuoteToASCII(name), "*", `\x2a`)
	return commentPrefix + q + " */ "
}

// nameFromQuery returns the name recorded by nameComment at the start of a statement,
// if there is one.
func nameFromQuery(query string) (string, bool) {
	rest, ok := strings.CutPrefix(query, commentPrefix)
	if !ok {
		return "", false
	}
	quoted, _, ok := strings.Cut(rest, " */ ")
	if !ok {
		return "", false
	}
	name, err := strconv.Unquote(quoted)
	return name, err == nil
}
