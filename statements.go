package advisory

import (
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// ownedBy is the condition, true only on this connection's own backend, that every
// statement acting on locks is made conditional on, in the same statement: $2 is the
// ownership token the connection's setup stored in the advisory.owner setting of its
// backend (see manager_setup.go). Behind a transaction-pooling proxy a statement can run on a
// backend that belongs to another client; there it does nothing, and the caller hears
// ErrPooler instead of taking, or releasing, someone else's lock.
const ownedBy = "pg_catalog.current_setting('" + ownerSetting + "', true) OPERATOR(pg_catalog.=) $2"

// Every server function, relation, type and operator the library names in SQL is
// written with its schema, pg_catalog (operators as OPERATOR(pg_catalog.=)): a role whose
// search_path puts another schema ahead of pg_catalog, or a schema other roles may
// create objects in, would otherwise run that schema's pg_advisory_lock or "=" instead,
// with the caller's privileges (the CVE-2018-1058 pattern). SQL keywords (CASE,
// coalesce, bigint, integer, boolean, current_user) resolve without the search_path.
// TestServerFunctionsCannotBeShadowed shadows every name the library's sources use.

// statements are the SQL a session runs for one lock of one mode (exclusive or shared).
// Each takes the key as $1. On a connection that may not go straight to its backend, lock,
// tryLock and unlock also take the connection's token as $2 and return, besides
// pg_backend_pid(), NULL when the statement ran on a backend that is not the
// connection's own (and so did nothing); they return pid 0 on a standby, where they do
// nothing (see statements_primary.go). On a direct connection (see
// look.directPath) they take only the key and return only the lock function's result: no
// other backend can be reached there, and the check would cost the server work on every
// statement.
type statements struct {
	lock, tryLock string // may carry the name comment (see nameComment)
	unlock        string
	reconcile     string // $2: the token, $3: classid, $4: objid; returns (owned, count)
	direct        bool   // lock, tryLock and unlock are the unchecked form
	keyInText     bool   // lock and tryLock carry the key as a literal and take no $1
}

// baseStatements are the unnamed statements of each mode, [direct][shared][pair], built
// once: a lock cycle then builds no SQL text unless the lock has a name.
var baseStatements = func() (b [2][2][2]statements) {
	for d, direct := range []bool{false, true} {
		for i, shared := range []bool{false, true} {
			for j, pair := range []bool{false, true} {
				b[d][i][j] = buildStatements(shared, pair, direct)
			}
		}
	}
	return b
}()

// statementsFor returns the statements of one lock: the base statements of its mode, with
// the name's comment (and on a direct connection its key) written in when it has a name.
func statementsFor(name string, shared, pair, direct bool) statements {
	st := baseStatements[b2i(direct)][b2i(shared)][b2i(pair)]
	// With a name the statement text differs per name: pin_prepared.go says when
	// such a text is prepared on a connection (from its 32nd use, within a budget per
	// connection) and when it is sent unprepared, parsed by the server each time.
	if name != "" {
		c := nameComment(name)
		lock, try := st.lock, st.tryLock
		if direct {
			// The text is the name's already, so the key (always KeyOf(name) for a named
			// lock) can be written into it too: a statement without a parameter costs
			// client and server less (2.5-3 % of a cycle measured interleaved). The
			// unlock statement keeps its parameter: shared by every name, it adds no
			// prepared statement per name on the connection.
			lit := keyLiteral(KeyOf(name))
			lock, try = strings.ReplaceAll(lock, "$1", lit), strings.ReplaceAll(try, "$1", lit)
			st.keyInText = true
		}
		st.lock, st.tryLock = c+lock, c+try
	}
	return st
}

// keyLiteral writes a key as a bigint constant: quoted, so that the most negative key
// is not read as the negation of a number too large for a bigint.
func keyLiteral(k Key) string { return "'" + strconv.FormatInt(int64(k), 10) + "'::bigint" }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// buildStatements builds the statements of one mode: exclusive or shared, bigint key or
// pair, direct connection or one that may be proxied.
func buildStatements(shared, pair, direct bool) statements {
	suffix, mode := "", "ExclusiveLock"
	if shared {
		suffix, mode = "_shared", "ShareLock"
	}
	// Every statement takes the key as one bigint, $1; the two-int4 form splits it here.
	args, subid := "($1)", "1"
	if pair {
		args, subid = "(($1::bigint OPERATOR(pg_catalog.>>) 32)::integer, ($1::bigint::bit(32))::integer)", "2"
	}
	// CASE evaluates its THEN branch only when the condition holds (a volatile function is
	// never evaluated ahead of time). lock, tryLock and unlock also return
	// pg_backend_pid(): a different backend than the connection's own is a proxy, too.
	// They also prove that they run on a primary (see statements_primary.go): their pid
	// is 0 on a standby, where they do nothing (an unlock there would release nothing of
	// ours: the caller hears ErrStandby and closes the connection, which does).
	when, end := lockRowStart+"CASE WHEN "+ownedOnPrimary+" THEN ", " END"
	if direct {
		when, end = "SELECT ", ""
	}
	return statements{
		direct:  direct,
		lock:    when + "pg_catalog.pg_advisory_lock" + suffix + args + " IS NOT NULL" + end,
		tryLock: when + "pg_catalog.pg_try_advisory_lock" + suffix + args + end,
		unlock:  when + "pg_catalog.pg_advisory_unlock" + suffix + args + end,
		// Unlock the key if, and only if, this backend holds it: unlike a bare unlock it
		// leaves no WARNING in the server log when it does not.
		reconcile: "SELECT " + ownedBy + ", pg_catalog.count(pg_catalog.pg_advisory_unlock" + suffix + args +
			") FROM pg_catalog.pg_locks WHERE " + ownedBy + " AND locktype OPERATOR(pg_catalog.=) 'advisory'" +
			" AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND granted" +
			" AND mode OPERATOR(pg_catalog.=) '" + mode + "' AND classid OPERATOR(pg_catalog.=) $3" +
			" AND objid OPERATOR(pg_catalog.=) $4 AND objsubid OPERATOR(pg_catalog.=) " + subid,
	}
}

// commentPrefix starts the comment that records a lock's name in the statement text, so
// that other sessions can read it from pg_stat_activity.query (see [Manager.Holders]).
// truncatedMark follows it when the comment records only the start of the name.
const (
	commentPrefix = "/* advisory lock "
	truncatedMark = "prefix "
)

// maxCommentName is the longest quoted name a comment records. The server keeps only the
// first track_activity_query_size bytes of a statement's text (1024 by default), so a
// comment that ran past them could not be read back at all: a longer name is recorded by
// its first runes, marked as a prefix.
const maxCommentName = 800

// nameComment returns the comment naming the lock. The name is Go-quoted (ASCII, no
// newlines) with every '*' escaped, so no name can end the comment early or open a nested
// one (neither "*/" nor "/*" can appear without a '*').
func nameComment(name string) string {
	q := quoteForComment(name)
	if len(q) <= maxCommentName {
		return commentPrefix + q + " */ "
	}
	cut := len(name)
	for len(q) > maxCommentName {
		cut = cut * maxCommentName / len(q) // shrink in proportion, then to a rune start
		for cut > 0 && !utf8.RuneStart(name[cut]) {
			cut--
		}
		q = quoteForComment(name[:cut])
	}
	return commentPrefix + truncatedMark + q + " */ "
}

func quoteForComment(name string) string {
	return strings.ReplaceAll(strconv.QuoteToASCII(name), "*", `\x2a`)
}

// heldComment is nameComment for the statements a holder runs after the lock statement
// (see pin.named): it also records since, when the lock was granted, in microseconds
// since the Unix epoch, because pg_stat_activity then shows those statements' times,
// not the grant's.
func heldComment(name string, since time.Time) string {
	c := nameComment(name)
	return c[:len(c)-len(" */ ")] + " since " + strconv.FormatInt(since.UnixMicro(), 10) + " */ "
}

// nameFromQuery returns the name recorded by nameComment or heldComment at the start of
// a statement, if there is one, whether it is only the name's start, and the grant time
// heldComment records (zero if none).
func nameFromQuery(query string) (name string, prefix bool, since time.Time, ok bool) {
	rest, ok := strings.CutPrefix(query, commentPrefix)
	if !ok {
		return "", false, time.Time{}, false
	}
	rest, prefix = strings.CutPrefix(rest, truncatedMark)
	quoted, err := strconv.QuotedPrefix(rest)
	if err != nil {
		return "", false, time.Time{}, false
	}
	tail := rest[len(quoted):]
	if after, found := strings.CutPrefix(tail, " since "); found {
		digits, end, found := strings.Cut(after, " */ ")
		us, err := strconv.ParseInt(digits, 10, 64)
		if !found || err != nil {
			return "", false, time.Time{}, false
		}
		since, tail = time.UnixMicro(us), " */ "+end
	}
	if !strings.HasPrefix(tail, " */ ") {
		return "", false, time.Time{}, false
	}
	name, err = strconv.Unquote(quoted)
	return name, prefix, since, err == nil
}

// activityName returns the name a lock's statements record (see nameComment), in its lock
// statements (statementsFor) and in those its holder runs later (pin.named): none where
// the Manager was made WithoutNamesInActivity.
func (m *Manager) activityName(name string) string {
	if m.set.noNames {
		return ""
	}
	return name
}

// textCache keeps the statement texts of the names a Manager locked, so that a Lock of a
// name locked before builds no SQL text (the name's comment costs three allocations):
// up to maxCachedNames entries of names up to maxCachedNameLen bytes. Names past either
// bound are built per call, as before the cache: a process that locks a name per
// entity (order:1234, ...) does not grow it without end.
type textCache struct {
	mu  sync.RWMutex
	m   map[textKey]statements
	txm map[txTextKey]statements // a transaction holding's (see textCache.tx)
}

type textKey struct {
	name                 string
	shared, pair, direct bool
}

const (
	maxCachedNames   = 1024
	maxCachedNameLen = 256
)

// statements returns statementsFor(name, shared, pair, direct), from the cache if it
// is there.
func (c *textCache) statements(name string, shared, pair, direct bool) statements {
	if name == "" || len(name) > maxCachedNameLen {
		return statementsFor(name, shared, pair, direct)
	}
	return cachedTexts(&c.mu, &c.m, textKey{name, shared, pair, direct}, func() statements {
		return statementsFor(name, shared, pair, direct)
	})
}

// cachedTexts returns (*m)[k] under mu, else build's, which it keeps while m holds fewer
// than maxCachedNames.
func cachedTexts[K comparable](mu *sync.RWMutex, m *map[K]statements, k K, build func() statements) statements {
	mu.RLock()
	st, ok := (*m)[k]
	mu.RUnlock()
	if ok {
		return st
	}
	st = build()
	mu.Lock()
	if *m == nil {
		*m = make(map[K]statements)
	}
	if len(*m) < maxCachedNames {
		(*m)[k] = st
	}
	mu.Unlock()
	return st
}

// Bulk statements: $1 the keys, $2 the connection's token (see ownedBy). Each returns
// whether it ran on the connection's own backend; where it did not, the WHERE clause let
// no key through, so nothing was locked or unlocked. Locks are taken in array order (the
// caller sorts by key). The two that lock take nothing on a standby and return pid 0
// there (see statements_primary.go).
const (
	lockAllSQL = lockRowStart + ownedBy + ", pg_catalog.count(pg_catalog.pg_advisory_lock(k)) " +
		"FROM pg_catalog.unnest($1::bigint[]) AS t(k) WHERE " + ownedOnPrimary
	tryLockAllSQL = lockRowStart + ownedBy + `,
	coalesce(pg_catalog.array_agg(k) FILTER (WHERE got), '{}'),
	coalesce(pg_catalog.array_agg(k) FILTER (WHERE NOT got), '{}')
FROM (SELECT k, pg_catalog.pg_try_advisory_lock(k) AS got FROM pg_catalog.unnest($1::bigint[]) AS t(k)
	WHERE ` + ownedOnPrimary + ") x"
	// reconcileKeysSQL unlocks those of the keys that this backend holds.
	reconcileKeysSQL = "SELECT " + ownedBy + `, pg_catalog.count(pg_catalog.pg_advisory_unlock(k))
FROM pg_catalog.unnest($1::bigint[]) AS t(k)
WHERE ` + ownedBy + ` AND EXISTS (SELECT FROM pg_catalog.pg_locks
	WHERE locktype OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
	AND granted AND mode OPERATOR(pg_catalog.=) 'ExclusiveLock' AND objsubid OPERATOR(pg_catalog.=) 1
	AND classid OPERATOR(pg_catalog.=) ((k OPERATOR(pg_catalog.>>) 32) OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid
	AND objid OPERATOR(pg_catalog.=) (k OPERATOR(pg_catalog.&) 4294967295)::pg_catalog.oid)`
	// unlockAllSQL releases every session lock of the backend (a Session's Close).
	// $1 is the token here.
	unlockAllSQL = "SELECT pg_catalog.pg_backend_pid(), CASE WHEN pg_catalog.current_setting('" + ownerSetting +
		"', true) OPERATOR(pg_catalog.=) $1 THEN pg_catalog.pg_advisory_unlock_all() IS NOT NULL END"
)
