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
type armer struct {
	delay   time.Duration // armDelay; longer in tests
	mu      sync.Mutex
	pending []*pin // queued since the last tick; some may have left watchArming since
	spare   []*pin // the previous tick's slice, reused; nil while run works through it
	wake    chan struct{}
	stop    chan struct{}
	done    chan struct{}
	parks   atomic.Int64 // how many times run parked (tests)
}

func newArmer(delay time.Duration) *armer {
	a := &armer{delay: delay, wake: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	go a.run()
	return a
}

// queue adds a session that has just become held (watchArming). The caller holds p.mu;
// it never blocks.
func (a *armer) queue(p *pin) {
	a.mu.Lock()
	first := len(a.pending) == 0
	a.pending = append(a.pending, p)
	a.mu.Unlock()
	if first {
		a.poke()
	}
}

// poke wakes run if it is parked; a wake already pending is enough.
func (a *armer) poke() {
	select {
	case a.wake <- struct{}{}:
	default:
	}
}

// run ticks every delay while its ticks find sessions queued at a rate of two or more
// per tick, and parks after a tick that finds fewer. In steady traffic it so wakes once
// per delay, on its timer: a queue finds it ticking, and its poke only fills the wake
// channel's buffer, without waking a thread (waking the goroutine for every Lock cost a
// thread wake-up per cycle; issue 47). Sparse traffic (a session or none per tick) parks
// it after each tick, as before: a tick that would find nothing costs a wake-up too.
func (a *armer) run() {
	defer close(a.done)
	t := time.NewTimer(a.delay)
	t.Stop()
	for {
		a.parks.Add(1)
		select {
		case <-a.wake:
		case <-a.stop:
			return
		}
		for busy := true; busy; {
			t.Reset(a.delay)
			select {
			case <-t.C:
			case <-a.stop:
				t.Stop()
				return
			}
			busy = a.tick() >= steadyBatch
		}
	}
}

// steadyBatch is how many sessions a tick must find for run to keep ticking.
const steadyBatch = 2

// tick registers the sessions queued since the last tick that are still held, and
// returns how many were queued. A session queued meanwhile waits for the next tick (run
// keeps ticking after a tick that found steadyBatch or more), or pokes run if it parked.
func (a *armer) tick() int {
	a.mu.Lock()
	batch := a.pending
	a.pending, a.spare = a.spare[:0], nil
	a.mu.Unlock()
	for i, p := range batch {
		p.armed()
		batch[i] = nil // the slice is reused: let ended sessions go
	}
	a.mu.Lock()
	a.spare = batch[:0]
	a.mu.Unlock()
	return len(batch)
}

// close stops the armer's goroutine; sessions still queued are not registered (Close
// has ended every session first).
func (a *armer) close() {
	close(a.stop)
	<-a.done
}

// armed is the armer's tick for p: if p is still held and waiting for it, the poller
// watches it from now on (or, if the poller refuses, a reader goroutine). Lock.File calls
// it too, at once: the descriptor is leaving the library's hands.
func (p *pin) armed() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.watch != watchArming {
		return // unlocked, handed off or in a transaction since: nothing to do
	}
	p.register()
}
