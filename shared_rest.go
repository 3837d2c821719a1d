package advisory

import (
	"context"
	"slices"
	"time"
)

// A shared session that holds nothing rests (WithSharedSessions): it stays open for the
// next call for hostLinger, then goes back to the pool; a call that needs a connection
// while the Manager pins every one takes a resting session's at once (reclaim), and while
// calls wait for a connection no session rests: an emptied one goes back at once (rest),
// and a call that starts to wait sends the resting ones back (release).

// hostLinger is how long a shared session that holds nothing stays open for the next
// call before it goes back to the pool. Opening one and giving it back costs the client
// a pool connection's set-up as a session (its watcher, its runner) and the server a
// statement (Session.Close's unlock of everything): a call after another, each finding
// the host just emptied, paid that each time (BenchmarkCycleCounts/shared, one core: 4
// goroutines, about 40 allocations and 15-20 µs of client CPU a cycle, and a round
// trip). A call that needs a connection while this Manager pins every one takes a
// resting host's at once (reclaim).
const hostLinger = 100 * time.Millisecond

// rest lets h, if it is idle, linger open for hs.linger (hostLinger) from now before it
// goes back to the pool (see expire, reclaim); under hs.mu. While calls of the Manager
// wait for a connection (see reserve), an idle h goes back at once instead.
func (hs *hostSet) rest(h *host) {
	if !hs.idle(h) {
		return
	}
	if h.s != nil && h.s.m.connWaiting.Load() > 0 {
		hs.drop(h)
		h.close()
		return
	}
	h.idleAt = time.Now()
	if h.resting {
		return // its timer runs, and looks at idleAt when it fires
	}
	h.resting = true
	if h.timer == nil {
		h.timer = time.AfterFunc(hs.linger, func() { hs.expire(h) })
	} else {
		h.timer.Reset(hs.linger)
	}
}

// expire ends h's linger: it goes back to the pool if it has rested idle for
// hs.linger; it rests on for what is left if it has been busy since; it stops resting
// if it is busy now (the next rest starts its timer again).
func (hs *hostSet) expire(h *host) {
	hs.mu.Lock()
	switch left := hs.linger - time.Since(h.idleAt); {
	case h.gone:
	case !hs.idle(h):
		h.resting = false
	case left > 0:
		h.timer.Reset(left)
	default:
		hs.drop(h)
		hs.mu.Unlock()
		h.close()
		return
	}
	hs.mu.Unlock()
}

// reclaim gives a resting host's connection back to the pool now, for a call that needs
// one while this Manager pins every connection (see Manager.acquire). It blocks while
// the host's session closes (one statement, bounded by cleanupTimeout), so that the
// connection is free when it returns, or until ctx ends (the close goes on in the
// background); it does nothing if no host rests.
func (hs *hostSet) reclaim(ctx context.Context) {
	hs.mu.Lock()
	var h *host
	for _, c := range hs.hosts {
		if hs.restsNow(c) {
			h = c
			break
		}
	}
	if h != nil {
		hs.drop(h)
	}
	hs.mu.Unlock()
	if h == nil {
		return
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		h.closeNow()
	}()
	select {
	case <-closed:
	case <-ctx.Done():
	}
}

// release gives the connections of the resting hosts back to the pool now, in the
// background: calls wait for one (see reserve), which each would otherwise keep for the
// rest of its linger.
func (hs *hostSet) release() {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for _, h := range slices.Clone(hs.hosts) {
		if hs.restsNow(h) {
			hs.drop(h)
			h.close()
		}
	}
}

// restsNow reports whether h rests: idle, its linger begun and not ended; under hs.mu.
func (hs *hostSet) restsNow(h *host) bool { return h.resting && hs.idle(h) }

// close gives the session of h, which holds nothing and is out of the set, back to the
// pool, in the background.
func (h *host) close() { go h.closeNow() }

// closeNow is close, waiting for it.
func (h *host) closeNow() {
	h.s.mu.Lock()
	h.s.peak = h.peak // Close retires the connection past WithSessionLimits' retireAfter
	h.s.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	h.s.Close(ctx) // on failure the connection is closed: it held nothing
}
