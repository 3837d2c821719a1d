package advisory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// Holdings that share a server session (WithSharedSessions). A host is one server
// session, opened as a Session of the Manager's (its connection, its turn, its watcher,
// its heartbeat, its loss), on which the locks of many Lock calls are held at once; each
// is a sharedHolding (shared_holding.go) with its own Done and Err. A lock that can be
// taken without waiting is tried on a host; a lock that must wait waits on a session of
// its own, as without the option. The Manager keeps its hosts in a hostSet:
//
//   - a host holds a key at most once, in whatever mode: PostgreSQL's advisory locks are
//     reentrant per session, so a second take of a key on the session that holds it would
//     succeed where it must wait. A call for a key that a host holds goes to another host,
//     or, exclusive, is refused at once (a try) or waits on a session of its own (a Lock);
//   - a host's statements are batches: each call queues its try or unlock, and the host's
//     runner sends all that is queued in one statement, on the host's turn
//     (shared_batch.go);
//   - a host is opened when every host that could take a key is full or has hostQueue
//     calls queued, and goes back to the pool once it has held nothing for hostLinger,
//     or at once when a call needs its connection (see rest);
//   - a host's loss ends every holding on it, each told with the loss.

// hostSet is a Manager's shared sessions.
type hostSet struct {
	mu     sync.Mutex
	hosts  []*host
	taken  takenRecently // keys a Lock's try found taken lately
	linger time.Duration // how long an idle host rests (hostLinger, but in tests)
	// waitPlaces has a value in it for each shared Lock waiting on a session of its own,
	// up to WithWaitSessions' bound (see shared_wait.go); nil without the bound.
	waitPlaces chan struct{}
	parkPhase  int64 // where the Manager's parked Locks' ticks fall, in ns (see parkPause)
	parked     int   // Locks parked now; while any is, an empty host stays open (see idle)
	// parkedFor has, for each key a parked Lock waits for, the channel that wakes it to
	// try at once when this Manager releases the key (see wakeParked); under mu.
	parkedFor map[gateKey]chan struct{}
	// first has a channel for each parked Lock that a queue overtook, oldest first: a
	// place freed goes to them before the other parked Locks (see givePlace); under mu.
	first []chan struct{}
	// room, once a Lock waits for a host whose opening waits for the pool, is closed when
	// an open host gains room (see choose); nil while no Lock waits so.
	room chan struct{}
}

// A host is one shared session and what it holds.
type host struct {
	s *Session // set before ready is closed, unless opening it failed
	// The batches (shared_batch.go): requests queued for the runner, which wake wakes;
	// stopped once the runner has ended. Under qmu.
	qmu     sync.Mutex
	queue   []*hostReq
	wake    chan struct{}
	stopped bool
	ready   chan struct{} // closed once the session is open, or failed to open
	openErr error         // why it failed to open
	waits   bool          // its opening waits for a pool connection (see start)
	// Under hostSet.mu: keys maps each key the host holds, or is being tried for, to its
	// holding (nil while being tried); busy counts the calls chosen for it that have not
	// finished their statement; gone is set once it is lost or retiring.
	keys map[gateKey]*sharedHolding
	busy int
	gone bool
	peak int // the most keys it held at once: past WithSessionLimits' retireAfter it is closed, not pooled
	// Under hostSet.mu: resting while it lingers idle (see rest), since idleAt; timer
	// ends the linger (see expire).
	resting bool
	idleAt  time.Time
	timer   *time.Timer
}

// sharable reports whether a call for t may take its lock on a shared session.
func (m *Manager) sharable(t target) bool {
	return m.set.sharePer > 0 && !t.solo && !t.pair && !t.quiet && !t.hidden
}

// hostQueue is how many calls may be in or queued for a host's batches before a call
// that could go there opens another host instead, if the pool has a connection to spare.
// A host sends what is queued in one statement (shared_batch.go), so a call waits about
// two round trips however many are queued: another session helps only past the point
// where one backend's work on a batch, not the round trip, is what the calls wait for.
const hostQueue = 64

// choose picks a host for t's key and reserves the key there: a host already open, or
// one it adds to the set for the caller to open (open set: see start), when every host
// that could take the key is full or has hostQueue calls (unless mayOpen is false, after
// the pool had no connection to spare: then the least busy host). A host whose opening
// waits for a pool connection (waits, not open yet) is chosen only by a Lock, and only
// when no other host has room; room is then a channel closed when a host that is open
// gains room (see gainedRoom), so that the Lock moves there. A try that finds no host
// with room after the pool had no connection to spare gets no host (h nil). It returns
// nil with held set if a host of this Manager holds the key in a mode that t conflicts
// with.
func (hs *hostSet) choose(t target, per int, mayOpen, try bool) (h *host, held, open bool, room <-chan struct{}) {
	k := gateKey{t.key, t.pair}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	var best, pending *host
	for _, c := range hs.hosts {
		if c.gone {
			continue
		}
		if sh, ok := c.keys[k]; ok {
			if !t.shared || sh == nil || !sh.t.shared {
				return nil, true, false, nil
			}
			continue
		}
		switch {
		case len(c.keys) >= per:
		case c.waits && c.s == nil: // its opening may wait for the pool
			if pending == nil || c.busy < pending.busy {
				pending = c
			}
		case best == nil || c.busy < best.busy:
			best = c
		}
	}
	switch {
	case best == nil && try && !mayOpen:
		return nil, false, false, nil
	case best == nil && pending != nil && !try:
		best = pending
	case best == nil || best.busy >= hostQueue && mayOpen:
		// busy 2: the caller's and the opening's own (see start).
		h = &host{keys: map[gateKey]*sharedHolding{k: nil}, busy: 2, ready: make(chan struct{}),
			waits: best == nil && !try, wake: make(chan struct{}, 1)}
		hs.hosts = append(hs.hosts, h)
		return h, false, true, hs.roomFor(h)
	}
	best.keys[k] = nil
	best.busy++
	return best, false, false, hs.roomFor(best)
}

// roomFor is the channel that tells a Lock waiting for h, a host whose opening waits for
// a pool connection, that another host has room now; nil for any other host. Under hs.mu.
func (hs *hostSet) roomFor(h *host) <-chan struct{} {
	if !h.waits || h.s != nil {
		return nil
	}
	if hs.room == nil {
		hs.room = make(chan struct{})
	}
	return hs.room
}

// gainedRoom tells the Locks waiting for a host's opening that a host has room; under
// hs.mu.
func (hs *hostSet) gainedRoom() {
	if hs.room != nil {
		close(hs.room)
		hs.room = nil
	}
}

// start opens the session of h, which choose added: waiting for a pool connection if no
// other host could take the key (h.waits: then on a goroutine of its own, with a ctx the
// caller cancels if it moves to another host: see takeShared), else only if the pool has
// one to spare. Calls that chose h meanwhile wait for it to be ready (see take). On
// failure h is gone, with the error in h.openErr; opened after every call that chose it
// went elsewhere, it goes back to the pool.
func (hs *hostSet) start(ctx context.Context, m *Manager, h *host) {
	s, err := m.openSession(ctx, h.waits)
	hs.mu.Lock()
	h.busy-- // the opening's own
	if err != nil {
		h.openErr = err
		hs.drop(h)
	} else {
		h.s = s
		m.active.Add(2) // Close waits until every holding has been told, and the runner has ended
		hs.rest(h)
	}
	hs.mu.Unlock()
	close(h.ready)
	if err == nil {
		go hs.watch(m, h)
		go func() {
			defer m.active.Done()
			h.run()
		}()
	}
}

// watch waits for the host's end, and ends each of its holdings with the host's error:
// its loss, or the Manager's Close.
func (hs *hostSet) watch(m *Manager, h *host) {
	defer m.active.Done()
	<-h.s.Done()
	err := h.s.Err()
	hs.mu.Lock()
	hs.drop(h)
	var ended []*sharedHolding
	for _, sh := range h.keys {
		if sh != nil {
			ended = append(ended, sh)
		}
	}
	hs.mu.Unlock()
	for _, sh := range ended {
		sh.end(err)
	}
}

// forget takes h, whose session a call saw end, out of the choice at once: its watch
// (which ends its holdings) may not have run yet.
func (hs *hostSet) forget(h *host) {
	hs.mu.Lock()
	hs.drop(h)
	hs.mu.Unlock()
}

// drop marks h gone and forgets it; under hs.mu.
func (hs *hostSet) drop(h *host) {
	h.gone = true
	if h.timer != nil {
		h.timer.Stop()
	}
	for i, c := range hs.hosts {
		if c == h {
			hs.hosts = append(hs.hosts[:i], hs.hosts[i+1:]...)
			return
		}
	}
}

// takenRecently remembers the keys whose try on a shared session found them taken, by
// slot (a key's low bits: keys are hashes), so that a Lock of a key contended across
// processes goes straight to its wait on a session of its own instead of first trying on
// a shared session, whose batches it would only slow (a hot key is taken nearly every
// time). A key is skipped for takenFor after it was found taken, except every
// probeEvery-th call, which tries again and keeps the record current. A slot holds one
// key: two keys on a slot only make one of them tried more often.
type takenRecently struct {
	keys  [takenSlots]atomic.Int64
	at    [takenSlots]atomic.Int64 // unix ns
	calls atomic.Uint32
}

const (
	takenSlots = 1024
	takenFor   = time.Second
)

func (r *takenRecently) slot(k Key) int { return int(uint64(k) % takenSlots) }

// skip reports whether a Lock of k skips its try on a shared session.
func (r *takenRecently) skip(k Key) bool {
	i := r.slot(k)
	return r.keys[i].Load() == int64(k) && time.Now().UnixNano()-r.at[i].Load() < int64(takenFor) &&
		r.calls.Add(1)%probeEvery != 0
}

// record notes that a try of k on a shared session found it taken.
func (r *takenRecently) record(k Key) {
	i := r.slot(k)
	r.keys[i].Store(int64(k))
	r.at[i].Store(time.Now().UnixNano())
}
