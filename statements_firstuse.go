package advisory

import (
	"hash/maphash"
	"strings"
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

// seenKey is the connection's CustomData key of the set of named statements it ran once.
const seenKey = "advisory.seen"

// maxSeen bounds that set per connection; when full it starts again (a text forgotten
// is sent unprepared once more).
const maxSeen = 2048

var seenSeed = maphash.MakeSeed()

// firstUse reports whether sql, a lock statement about to run on p's connection, is a
// named statement the connection has not run yet: then it is sent unprepared. It records
// the use. Unnamed statements, one text for every key, are always
// prepared; so is everything when the connection's own mode does not cache statements.
func (p *pin) firstUse(sql string) bool {
	if !p.m.cachesStatements || !strings.HasPrefix(sql, commentPrefix) {
		return false
	}
	data := p.pg.CustomData()
	seen, _ := data[seenKey].(map[uint64]struct{})
	if seen == nil || len(seen) >= maxSeen {
		seen = make(map[uint64]struct{})
		data[seenKey] = seen
	}
	h := maphash.String(seenSeed, sql)
	if _, ok := seen[h]; ok {
		return false
	}
	seen[h] = struct{}{}
	return true
}
