package advisory

import (
	"hash/maphash"
	"strings"

	"github.com/jackc/pgx/v5"
)

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
