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
// throughput at 1,000 names, against 1.08x for the same locks by key). So a named
// statement is sent unprepared, in one round trip, the first time a connection runs it,
// and prepared from the second: a name locked again and again still runs prepared (its
// parse and plan saved), a name seen once costs no more than one round trip.
//
// Prepared named texts are also bounded per connection, to half of pgx's statement cache
// (Manager.preparedBudget): a service that locks more names than the cache holds would
// otherwise have pgx evict a prepared name to prepare the next one, and prepare the
// evicted one again at its next use, so that most locks cost two round trips
// (BenchmarkCycleManyNames, 1,000 names on one connection: 1.57x the raw floor). Once a
// connection has prepared its budget, further names stay unprepared: one round trip
// each, parsed by the server, and the prepared ones are never evicted by the library's
// own statements. The other half of the cache is left to the unnamed statements and the
// caller's own (BeginFunc and the like).

// seenKey is the connection's CustomData key of the set of named statements it ran once;
// preparedKey that of the named statements it prepared (never reset: pgx keeps them).
const (
	seenKey     = "advisory.seen"
	preparedKey = "advisory.prepared"
)

// maxSeen bounds that set per connection; when full it starts again (a text forgotten
// is sent unprepared once more).
const maxSeen = 2048

var seenSeed = maphash.MakeSeed()

// unprepared reports whether sql, a lock statement about to run on p's connection, is
// to be sent unprepared: a named statement the connection has not run yet, or one it has
// but may not prepare, its budget of prepared names spent. It records the use. Unnamed
// statements, one text for every key, are always prepared; so is everything when the
// connection's own mode does not cache statements.
func (p *pin) unprepared(sql string) bool {
	if p.m.preparedBudget == 0 || !strings.HasPrefix(sql, commentPrefix) {
		return false
	}
	data := p.pg.CustomData()
	h := maphash.String(seenSeed, sql)
	prepared, _ := data[preparedKey].(map[uint64]struct{})
	if _, ok := prepared[h]; ok {
		return false
	}
	seen, _ := data[seenKey].(map[uint64]struct{})
	if seen == nil || len(seen) >= maxSeen {
		seen = make(map[uint64]struct{})
		data[seenKey] = seen
	}
	if _, ok := seen[h]; !ok {
		seen[h] = struct{}{}
		return true
	}
	if len(prepared) >= p.m.preparedBudget {
		return true
	}
	if prepared == nil {
		prepared = make(map[uint64]struct{})
		data[preparedKey] = prepared
	}
	prepared[h] = struct{}{}
	return false
}

// preparedBudget returns how many named statements a connection of cfg may prepare (see
// Manager.preparedBudget).
func preparedBudget(cfg *pgx.ConnConfig) int {
	if cfg.DefaultQueryExecMode != pgx.QueryExecModeCacheStatement {
		return 0
	}
	return cfg.StatementCacheCapacity / 2
}
