package advisory

import (
	"sync"
	"sync/atomic"
	"time"
)

// Arming the poller late. Registering a held session's socket with the poller costs two
// system calls (epoll_ctl ADD when the lock is held, DEL before the unlock statement),
// about 5 µs of a 100 µs lock cycle: the largest cost the library adds to raw pgx (see
// docs/benchmarks.md, "Where a cycle's time goes"). Most locks are held for less than a
// millisecond. So a held session waits in the Manager's armer first (watchArming: a
// slice append, no system call), and the armer registers the sessions still held at its
// next tick, at most armDelay after they were queued. A lock released before that never
// touches the epoll set.
//
// What it costs: a loss in a holding's first armDelay is seen when the armer registers
// the socket (epoll reports what already came at once), not the moment it comes: Done
// closes up to armDelay later. The keepalive bounds are seconds and do not move. A
// session the server ends (a termination, a restart) sends its FATAL before its backend
// frees the lock, a few hundred µs to a few ms later; for an ending in the holding's
// first armDelay the lock may be free before Done closes (docs/guarantees.md, "A holding
// is watched from its first millisecond"). An Unlock meanwhile reads the loss itself, as
// before.

// armDelay is the longest a held session waits in the armer before the poller watches
// it.
const armDelay = time.Millisecond

// armer registers held sessions with the poller once they have been held for a while.
//
// Its goroutine sleeps on one timer, set by the first session queued while it is not
// set, and stopped again when the last session queued leaves watchArming before the
// tick (released, handed off, or in a transaction): a lock held for less than the delay
// wakes nothing at all, not the goroutine and not a thread for it (issue 47: until then
// every Lock after a quiet tick woke the goroutine, and its tick woke it again). Setting
// a timer can wake an idle thread too (the runtime hands new timers to a thread in the
// network poller), so steady traffic ticks instead: a queue that sets the timer within
// a delay of the last one that set it, or a tick that finds steadyBatch sessions or
// more, keeps the timer going from tick to tick whoever leaves meanwhile, one wake-up
// per delay rather than a timer set per Lock; a tick that finds fewer lets it stop.
type armer struct {
	delay   time.Duration // armDelay; longer in tests
	mu      sync.Mutex
	pending []*pin    // queued since the last tick; some may have left watchArming since
	spare   []*pin    // the previous tick's slice, reused; nil while tick works through it
	arming  int       // sessions queued and still in watchArming (in pending or a tick's batch)
	set     bool      // the timer is set (or has fired and its tick has not begun)
	ticking bool      // steady traffic: the timer is set again at each tick, whoever leaves (see tick)
	lastSet time.Time // when a queue last set the timer
	timer   *time.Timer
	stop    chan struct{}
	done    chan struct{}
	parks   atomic.Int64 // 1 + how many ticks left the armer without a tick to come (tests)
	ticks   atomic.Int64 // how many ticks ran (tests)
}

func newArmer(delay time.Duration) *armer {
	a := &armer{delay: delay, timer: time.NewTimer(time.Hour), stop: make(chan struct{}), done: make(chan struct{})}
	a.timer.Stop()
	a.parks.Store(1)
	go a.run()
	return a
}

// queue adds a session that has just become held (watchArming), and sets the timer if it
// is not set. The caller holds p.mu; it never blocks.
func (a *armer) queue(p *pin) {
	a.mu.Lock()
	a.pending = append(a.pending, p)
	a.arming++
	if !a.set {
		now := time.Now()
		if now.Sub(a.lastSet) < a.delay {
			a.ticking = true // a holding per delay or more: tick through it (see tick)
		}
		a.lastSet = now
		a.timer.Reset(a.delay)
		a.set = true
	}
	a.mu.Unlock()
}

// left is told that a queued session left watchArming (see pin.setWatch). If it was the
// last, and traffic is not steady, the timer is stopped: no tick is needed. The caller
// holds p.mu.
func (a *armer) left() {
	a.mu.Lock()
	a.arming--
	if a.arming == 0 && a.set && !a.ticking {
		a.timer.Stop() // a tick whose timer already fired finds nothing to do
		a.set = false
		clear(a.pending) // every one has left watchArming: let them go
		a.pending = a.pending[:0]
	}
	a.mu.Unlock()
}

// run ticks whenever the timer fires, until close.
func (a *armer) run() {
	defer close(a.done)
	for {
		select {
		case <-a.timer.C:
			a.tick()
		case <-a.stop:
			return
		}
	}
}

// steadyBatch is how many sessions a tick must find for the timer to be set again at
// once, whatever the sessions queued meanwhile do.
const steadyBatch = 2

// tick registers the sessions queued since the last tick that are still held, and
// returns how many were queued. A session queued meanwhile sets the timer again (queue),
// unless the tick keeps it going.
func (a *armer) tick() int {
	a.ticks.Add(1)
	a.mu.Lock()
	a.set = false // it fired; a queue from now on sets it again
	batch := a.pending
	a.pending, a.spare = a.spare[:0], nil
	a.mu.Unlock()
	for i, p := range batch {
		p.armed()
		batch[i] = nil // the slice is reused: let ended sessions go
	}
	a.mu.Lock()
	a.spare = batch[:0]
	a.ticking = len(batch) >= steadyBatch
	if (a.ticking || a.arming > 0) && !a.set {
		a.timer.Reset(a.delay)
		a.set = true
	}
	if !a.set {
		a.parks.Add(1)
	}
	a.mu.Unlock()
	return len(batch)
}

// close stops the armer's goroutine; sessions still queued are not registered (Close
// has ended every session first).
func (a *armer) close() {
	close(a.stop)
	<-a.done
	a.timer.Stop()
}

// armed is the armer's tick for p: if p is still held and waiting for it, the poller
// watches it from now on (or, if the poller refuses, a reader goroutine), and its
// heartbeat starts (see startHeartbeatLate). Lock.File calls it too, at once: the
// descriptor is leaving the library's hands.
func (p *pin) armed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watch != watchArming {
		return // unlocked, handed off or in a transaction since: nothing to do
	}
	p.register()
	p.beatLater()
}
