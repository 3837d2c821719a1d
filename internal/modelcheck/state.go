package modelcheck

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory"
)

// The state of the model: what its Managers, Locks and Sessions are, according to the
// model. See the package doc for the overview.

const (
	modelManagers = 3
	modelNames    = 5 // lock names k0..k4: few, so that contention is real
	// maxHandles caps a Manager's live Locks and Sessions (plus the calls of one batch
	// that may pin a connection), well below its pool size, so ErrPoolExhausted never
	// legitimately happens.
	maxHandles = 8
	maxEnded   = 6 // ended Locks and Sessions kept around for Unlock/Close twice

	liveBound = 2500 * time.Millisecond // every call's ctx ends by then
	lateBound = time.Second             // a call must return this soon after its ctx ended
	// cancelGrace is the Managers' WithCancelGrace. PostgreSQL ignores a CancelRequest that
	// reaches the backend before it starts the statement (it happens under load); the
	// wait then ends when the grace runs out. With the default 1s that alone would break
	// lateBound; it is a separate finding, not what the bound is for.
	cancelGrace = 300 * time.Millisecond
	settleBound = 5 * time.Second  // how long the server may take to agree with the model
	hangBound   = 60 * time.Second // a batch running longer than this is a hang
)

// hState is what the model knows of a Lock or Session.
type hState int

const (
	hLive     hState = iota
	hReleased        // Unlock or Close
	hLost            // terminated, or its Manager closed
)

func (s hState) String() string { return [...]string{"live", "released", "lost"}[s] }

// mgrSlot is one of the test's Managers; Close replaces it with a new one (gen+1).
type mgrSlot struct {
	idx  int
	gen  int
	app  string // application_name of its connections: how pg_locks rows are traced to it
	dsn  string
	opts []advisory.Option // Config.ManagerOptions, and Config.Extra's for this slot
	m    *advisory.Manager
}

func (s *mgrSlot) String() string { return fmt.Sprintf("m%d.%d", s.idx, s.gen) }

type lockH struct {
	id     int
	slot   string // the slot as it was when the Lock was taken
	app    string
	m      *advisory.Manager
	name   string // short name
	shared bool
	l      *advisory.Lock
	pid    uint32
	state  hState
	token  int64 // its fencing token, once Token returned one
	// sharing: held on a session its Manager's other holdings may share
	// (WithSharedSessions): several live Locks on one backend, and BeginFunc and Token
	// refused with ErrSharedSession.
	sharing bool
	txHolding
}

func (h *lockH) String() string {
	mode := ""
	if h.shared {
		mode = " shared"
	}
	return fmt.Sprintf("L%d(%s %s%s pid %d)", h.id, h.slot, h.name, mode, h.pid)
}

type sessH struct {
	id    int
	slot  string
	app   string
	m     *advisory.Manager
	S     *advisory.Session
	pid   uint32
	held  map[string]int // short name → hold count (Session locks are reentrant)
	state hState
	// closed: Close was called. After a loss and then Close, calls may report the loss
	// or ErrNotHeld ("closed"); unsure which is right, both are accepted.
	closed bool
	txHolding
}

func (h *sessH) String() string { return fmt.Sprintf("S%d(%s pid %d)", h.id, h.slot, h.pid) }

func (h *sessH) heldNames() []string {
	out := make([]string, 0, len(h.held))
	for n := range h.held {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// world is the model plus the real objects it describes. Only the test's goroutine
// touches it; a batch's calls run in their own goroutines with what they need copied
// into their op.
type world struct {
	t        *testing.T
	seed     uint64
	rng      *rand.Rand
	prefix   string // of the full lock names
	names    []string
	slots    []*mgrSlot
	locks    []*lockH
	sessions []*sessH
	nextID   int
	dead     map[uint32]bool // backends terminated so far
	batch    []*op           // the calls of the current step
	checks   map[opKind]int  // the most ctx.Err checks seen in one call of each kind
	fence    fenceState      // the fencing table, the rows, and counts

	admin *pgxpool.Pool // the harness's pool: pg_locks, the fencing tables
	// handoffs: the Managers pass locks in process; draw batches that make them (handoff.go)
	handoffs bool

	verbose  bool
	hung     bool // a batch did not return
	step     int
	calls    int
	trace    []string
	outcomes map[string]map[string]int // call → outcome class → count
	spent    map[string]time.Duration  // call → total time in it
	maxLate  time.Duration             // slowest return after a ctx ended
	inCalls  time.Duration             // time spent running batches
	settling time.Duration             // time spent waiting for the server to agree
	// sharedSeen counts the checks that found a backend with several live Locks (shared
	// sessions), sharedPeak the most Locks seen on one.
	sharedSeen, sharedPeak int
	shared                 map[int]bool                // Config.Shared
	parked                 map[int]bool                // Config.Parked
	resting                func(*advisory.Manager) int // Config.Resting
}

func (w *world) full(name string) string      { return w.prefix + name }
func (w *world) key(name string) advisory.Key { return advisory.KeyOf(w.full(name)) }
func (w *world) fulls(names []string) (out []string) {
	for _, n := range names {
		out = append(out, w.full(n))
	}
	return out
}

// shortOf names a key in messages: k0..k4 for ours.
func (w *world) shortOf(key advisory.Key) string {
	for _, n := range w.names {
		if w.key(n) == key {
			return n
		}
	}
	return key.String()
}

func (w *world) apps() []string {
	out := make([]string, len(w.slots))
	for i, s := range w.slots {
		out[i] = s.app
	}
	return out
}

func (w *world) liveLocks() (out []*lockH) {
	for _, h := range w.locks {
		if h.state == hLive {
			out = append(out, h)
		}
	}
	return out
}

func (w *world) liveSessions() (out []*sessH) {
	for _, h := range w.sessions {
		if h.state == hLive {
			out = append(out, h)
		}
	}
	return out
}

// handles counts the live Locks and Sessions of a Manager: each pins one connection.
func (w *world) handles(m *advisory.Manager) int {
	n := 0
	hosts := map[uint32]bool{} // shared sessions: one connection each, however many Locks
	for _, h := range w.liveLocks() {
		switch {
		case h.m != m:
		case !h.sharing:
			n++
		case !hosts[h.pid]:
			hosts[h.pid] = true
			n++
		}
	}
	for _, h := range w.liveSessions() {
		if h.m == m {
			n++
		}
	}
	return n
}

// freeNames returns the names nothing the model knows of holds, in name order.
func (w *world) freeNames() []string {
	var free []string
	for _, n := range w.names {
		if w.compatible(n, false, nil) {
			free = append(free, n)
		}
	}
	return free
}

// compatible reports whether a request for name (shared or not, from Session self or,
// if nil, from a new connection) would be granted now: no live holder conflicts with it.
func (w *world) compatible(name string, shared bool, self *sessH) bool {
	for _, h := range w.liveLocks() {
		if h.name == name && (!shared || !h.shared) {
			return false
		}
	}
	for _, h := range w.liveSessions() {
		if h != self && h.held[name] > 0 {
			return false
		}
	}
	return true
}

// holderPIDs returns the backends the model says hold name.
func (w *world) holderPIDs(name string) []uint32 {
	var out []uint32
	for _, h := range w.liveLocks() {
		if h.name == name {
			out = append(out, h.pid)
		}
	}
	for _, h := range w.liveSessions() {
		if h.held[name] > 0 {
			out = append(out, h.pid)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// prune forgets ended handles beyond the few kept for calls on ended handles.
func (w *world) prune() {
	w.locks = keepRecent(w.locks, func(h *lockH) bool { return h.state == hLive })
	w.sessions = keepRecent(w.sessions, func(h *sessH) bool { return h.state == hLive })
}

// keepRecent keeps the live handles and the maxEnded most recent ended ones, in order.
func keepRecent[T any](hs []T, live func(T) bool) []T {
	ended := 0
	var keep []T
	for i := len(hs) - 1; i >= 0; i-- {
		if live(hs[i]) || ended < maxEnded {
			if !live(hs[i]) {
				ended++
			}
			keep = append(keep, hs[i])
		}
	}
	slices.Reverse(keep)
	return keep
}
