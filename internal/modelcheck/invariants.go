package modelcheck

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pgadvisory/advisory"
)

// The invariants the model checks against the server after every batch.

// srvRow is one advisory lock row of pg_locks that concerns the test: on one of its keys,
// or of one of its Managers' backends.
type srvRow struct {
	pid     uint32
	key     advisory.Key
	subid   int16
	shared  bool
	granted bool
	app     string
}

func (r srvRow) describe(w *world) string {
	mode, state := "exclusive", "holds"
	if r.shared {
		mode = "shared"
	}
	if !r.granted {
		state = "waits for"
	}
	return fmt.Sprintf("pid %d (%q) %s %s %s", r.pid, r.app, state, mode, w.shortOf(r.key))
}

func (w *world) serverRows() ([]srvRow, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	keys := make([]int64, len(w.names))
	for i, n := range w.names {
		keys[i] = int64(w.key(n))
	}
	rows, err := w.admin.Query(ctx, `
		SELECT l.pid, l.classid::bigint << 32 | l.objid::bigint, l.objsubid, l.mode = 'ShareLock', l.granted,
		       coalesce(a.application_name, '')
		FROM pg_locks l LEFT JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory'
		  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
		  AND ((l.classid::bigint << 32 | l.objid::bigint) = ANY($1) OR a.application_name = ANY($2))
		ORDER BY 2, 5 DESC, 1`, keys, w.apps())
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []srvRow
	for rows.Next() {
		var r srvRow
		var key int64
		if err := rows.Scan(&r.pid, &key, &r.subid, &r.shared, &r.granted, &r.app); err != nil {
			return nil, err
		}
		r.key = advisory.Key(key)
		out = append(out, r)
	}
	return out, rows.Err()
}

// hold is one granted lock: a backend, a key, a mode.
type hold struct {
	pid    uint32
	key    advisory.Key
	shared bool
}

// invariants returns every way the server, the handles and the model disagree now.
func (w *world) invariants() []string {
	rows, err := w.serverRows()
	if err != nil {
		return []string{"reading pg_locks: " + err.Error()}
	}
	granted := map[hold]bool{}
	for _, r := range rows {
		if r.granted && r.subid == 1 {
			granted[hold{r.pid, r.key, r.shared}] = true
		}
	}
	claimed, bad := w.handlesHold(granted)
	bad = append(bad, w.rowsExplained(rows, claimed)...)
	bad = append(bad, w.txIdle()...)
	for _, s := range w.slots {
		rest := 0
		if w.resting != nil {
			rest = w.resting(s.m)
		}
		if got, want := s.m.Stat().AcquiredConns(), w.handles(s.m); int(got) != want+rest {
			bad = append(bad, fmt.Sprintf("%v: %d pool connections acquired, but %d live Locks and Sessions and %d resting shared sessions",
				s, got, want, rest))
		}
	}
	return bad
}

// handlesHold checks that every live handle holds what it claims (per pg_locks), and
// returns those claims.
func (w *world) handlesHold(granted map[hold]bool) (map[hold]string, []string) {
	claimed := map[hold]string{}
	owner := map[uint32]string{}
	sharers := map[uint32]*advisory.Manager{} // backends of shared sessions, and their Manager
	var bad []string
	claim := func(pid uint32, what string, sharing *advisory.Manager) {
		other, ok := owner[pid]
		if ok && (sharing == nil || sharers[pid] != sharing) {
			bad = append(bad, fmt.Sprintf("two live handles on one backend: %s and %s", other, what))
		}
		owner[pid] = what
		if sharing != nil && !ok {
			sharers[pid] = sharing
		}
	}
	for _, h := range w.liveLocks() {
		if err := h.l.Err(); err != nil {
			bad = append(bad, fmt.Sprintf("%v ended unexpectedly: %v", h, err))
			continue
		}
		k := hold{h.pid, w.key(h.name), h.shared}
		if !granted[k] {
			bad = append(bad, fmt.Sprintf("%v is live (Err nil), but pg_locks shows no such granted lock", h))
		}
		if other := claimed[k]; other != "" { // PostgreSQL grants a session's lock again to it
			bad = append(bad, fmt.Sprintf("two live Locks claim one lock of one backend: %s and %v", other, h))
		}
		claimed[k] = h.String()
		var sharing *advisory.Manager
		if h.sharing {
			sharing = h.m
		}
		claim(h.pid, h.String(), sharing)
	}
	w.countShared()
	for _, h := range w.liveSessions() {
		if err := h.S.Err(); err != nil {
			bad = append(bad, fmt.Sprintf("%v (holding %v) ended unexpectedly: %v", h, h.heldNames(), err))
			continue
		}
		if got := h.S.Held(); got != len(h.held) {
			bad = append(bad, fmt.Sprintf("%v: Held() is %d, the model says %d (%v)", h, got, len(h.held), h.held))
		}
		for _, n := range h.heldNames() {
			k := hold{h.pid, w.key(n), false}
			if !granted[k] {
				bad = append(bad, fmt.Sprintf("%v holds %s (model), but pg_locks shows no such granted lock", h, n))
			}
			claimed[k] = h.String()
		}
		claim(h.pid, h.String(), nil)
	}
	return claimed, bad
}

// countShared records how many live Locks share a backend now (see world.sharedSeen).
func (w *world) countShared() {
	per := map[uint32]int{}
	most := 0
	for _, h := range w.liveLocks() {
		if h.sharing {
			per[h.pid]++
			most = max(most, per[h.pid])
		}
	}
	if most > 1 {
		w.sharedSeen++
	}
	w.sharedPeak = max(w.sharedPeak, most)
}

// rowsExplained checks that each row of pg_locks is a lock some live handle reports,
// that nothing waits, and that holders of one key are compatible.
func (w *world) rowsExplained(rows []srvRow, claimed map[hold]string) []string {
	var bad []string
	type modes struct{ exclusive, shared []uint32 }
	perKey := map[advisory.Key]*modes{}
	for _, r := range rows {
		switch {
		case !r.granted:
			bad = append(bad, "waiter left behind: "+r.describe(w))
			continue
		case r.subid != 1 || claimed[hold{r.pid, r.key, r.shared}] == "":
			bad = append(bad, "lock held that no live Lock or Session reports: "+r.describe(w)+w.suspects(r))
		}
		if perKey[r.key] == nil {
			perKey[r.key] = &modes{}
		}
		if m := perKey[r.key]; r.shared {
			m.shared = append(m.shared, r.pid)
		} else {
			m.exclusive = append(m.exclusive, r.pid)
		}
	}
	for key, m := range perKey {
		if len(m.exclusive) > 1 || (len(m.exclusive) == 1 && len(m.shared) > 0) {
			bad = append(bad, fmt.Sprintf("%s held by exclusive %v and shared %v at once", w.shortOf(key), m.exclusive, m.shared))
		}
	}
	return bad
}

// suspects names the calls of this step on the row's Manager and key.
func (w *world) suspects(r srvRow) string {
	var out []string
	for _, o := range w.batch {
		for _, k := range o.keys {
			if k == r.key && o.app == r.app {
				out = append(out, fmt.Sprintf("[%d] %v", o.idx, o))
			}
		}
	}
	if len(out) == 0 {
		return ""
	}
	return "; this step's calls on it: " + strings.Join(out, ", ")
}

// settle polls the invariants until they hold or settleBound passes: the server may
// lag behind what the handles report (a terminated backend's locks are freed after its
// client has been told; a closed connection's backend exits a little later).
func (w *world) settle() []string {
	deadline := time.Now().Add(settleBound)
	for {
		bad := w.invariants()
		if len(bad) == 0 || time.Now().After(deadline) {
			sort.Strings(bad)
			return bad
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}
