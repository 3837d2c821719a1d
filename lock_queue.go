package advisory

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/pgadvisory/advisory/internal/goid"
)

// A gate queues a Manager's exclusive Lock calls for one key. Three rules, so that N
// goroutines contending for a key are served first come first served and pin at most
// gateSlots connections:
//
//   - one call at a time waits on the server (the others wait here, in order): the server
//     sees them one by one, in queue order;
//   - the next call may start waiting only while fewer than gateSlots sessions of the key
//     exist (the holder's, and the waiter's), counting a session until its connection is
//     back in the pool;
//   - while a holder of this Manager may pass the lock on in the process (see handOff and
//     WithLocalHandoff), no call waits on the server: the queue waits for the holder's
//     Unlock, which either hands the lock to the queue's head or releases it on the
//     server, and only then does the head go to the server, behind the waiters already
//     there.
//
// A call let in asks for a connection only then; when the Manager's sessions pin every
// one, it is served in the order the calls began (see reserve), so that its time in this
// queue keeps its place against calls that asked for a connection meanwhile.
type gate struct {
	waiting  bool      // a call is waiting on the server
	sessions int       // gated sessions of this key that exist
	queue    []*waiter // queued calls, oldest first
	// holder is the held session that may hand the lock to the queue's head (nil if none:
	// handoff off, or the holder is not eligible); run counts its backend's consecutive
	// handoffs since runStart, when the backend took the lock from the server.
	holder   *pin
	run      int
	runStart time.Time
}

// A waiter is one queued call. Its turn is closed to let it in: to wait on the server
// (next nil), or with the lock already held for it on next (a handoff). Both are set
// under the gates' mutex; next is set before turn is closed.
type waiter struct {
	turn    chan struct{}
	t       target
	handoff bool // the call may take a handoff (see eligible)
	next    *pin
}

const gateSlots = 2

// gateKey names a gate: the key and its form (a pair and a bigint are different locks).
type gateKey struct {
	key  Key
	pair bool
}

// gates is a Manager's set of gates, one per key with calls queued, waiting or holding.
type gates struct {
	mu    sync.Mutex
	m     map[gateKey]*gate
	spare *gate // the last gate forgotten, reused: an uncontended Lock allocates none
}

// enter blocks until the caller may wait on the server for t's key (it returns nil, nil),
// or a holder of this Manager handed the lock over (it returns the held session), or ctx
// ends (it returns ctx's error), or closed is closed (ErrClosed). After nil, nil, the
// caller must call stopWaiting when its lock statement has returned.
func (gs *gates) enter(ctx context.Context, t target, closed <-chan struct{}) (*pin, error) {
	k := gateKey{t.key, t.pair}
	gs.mu.Lock()
	g := gs.get(k)
	if g.open() && len(g.queue) == 0 {
		g.waiting = true
		gs.mu.Unlock()
		return nil, nil
	}
	w := &waiter{turn: make(chan struct{}), t: t, handoff: t.eligible()}
	g.queue = append(g.queue, w)
	if h := g.holder; h != nil && h.m.set.logger != nil {
		me := goid.ID()
		warn := time.AfterFunc(waitLogAfter, func() { gs.warnSelfWait(k, w, h, me) })
		defer warn.Stop()
	}
	gs.mu.Unlock()
	var err error
	select {
	case <-w.turn:
		return w.next, nil
	case <-ctx.Done():
		err = fmt.Errorf("queued behind another Lock of this key in this process: %w", ctx.Err())
	case <-closed:
		err = ErrClosed
	}
	gs.mu.Lock()
	next := w.next
	switch {
	case next != nil: // handed the lock just as the wait ended: pass it on (see refuse)
	case isClosed(w.turn): // let in just as the wait ended: give the turn to the next call
		g.waiting = false
	default:
		for i, q := range g.queue {
			if q == w {
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				break
			}
		}
	}
	gs.advance(k, g)
	gs.mu.Unlock()
	if next != nil {
		<-w.turn // the holder closes it as soon as the session is set up (see handOff)
		next.refuse()
	}
	return nil, err
}

// warnSelfWait records a call still queued behind the same holding of this Manager that
// it queued behind: a holder that may hand the lock on keeps the queue in the process,
// where no server wait reports it. At Warn with selfWaitHint if that holding was given
// to the queued call's goroutine g (it waits for itself); else at Info, as the server
// wait's record of ordinary contention (see logWait).
func (gs *gates) warnSelfWait(k gateKey, w *waiter, h *pin, g uint64) {
	gs.mu.Lock()
	gt := gs.m[k]
	still := gt != nil && gt.holder == h && !isClosed(w.turn)
	gs.mu.Unlock()
	switch {
	case !still:
	case g != 0 && h.holderG.Load() == g:
		h.log(slog.LevelWarn, "advisory: waiting for a lock this Manager holds", slog.Bool("queued", true),
			slog.Duration("waited", waitLogAfter), slog.String("hint", selfWaitHint))
	default:
		h.log(slog.LevelInfo, "advisory: waiting for lock", slog.Bool("queued", true),
			slog.Duration("waited", waitLogAfter), slog.Bool("held_by_this_manager", true), slog.String("hint", ownWaitHint))
	}
}

func isClosed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// open reports whether a call may go to the server now (see the rules of gate).
func (g *gate) open() bool {
	return !g.waiting && g.sessions < gateSlots && g.holder == nil
}

// stopWaiting records that the waiter's lock statement returned (granted or not).
func (gs *gates) stopWaiting(k gateKey) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[k]
	g.waiting = false
	gs.advance(k, g)
}

// sessionStarted and sessionEnded count the gated sessions of k that hold a connection.
func (gs *gates) sessionStarted(k gateKey) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	gs.get(k).sessions++
}

func (gs *gates) sessionEnded(p *pin) {
	k := gateKey{p.key, p.pair}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[k]
	g.sessions--
	if g.holder == p {
		g.holder = nil
	}
	gs.advance(k, g)
}

func (gs *gates) get(k gateKey) *gate {
	if gs.m == nil {
		gs.m = make(map[gateKey]*gate)
	}
	g := gs.m[k]
	if g == nil {
		g, gs.spare = gs.spare, nil
		if g == nil {
			g = &gate{}
		}
		gs.m[k] = g
	}
	return g
}

// advance lets the next queued call in if the rules allow, and forgets an idle gate.
func (gs *gates) advance(k gateKey, g *gate) {
	if g.open() && len(g.queue) > 0 {
		g.waiting = true
		close(g.queue[0].turn)
		g.queue = g.queue[1:]
	}
	if !g.waiting && g.sessions == 0 && len(g.queue) == 0 {
		delete(gs.m, k)
		*g = gate{}
		gs.spare = g
	}
}

// queueRoute queues a Lock call behind this Manager's other calls for the key (see
// gates), so that they wait on the server one at a time instead of each pinning a
// connection. It serves the call (served) if a holder of this Manager handed it the
// lock (see lock_handoff.go), or if its wait in the queue failed; else the call goes on,
// first in the queue, and must leave it (gates.stopWaiting) when it returns.
func (m *Manager) queueRoute(c *lockCall) (l *Lock, served bool, err error) {
	handed, err := m.gates.enter(c.ctx, c.t, m.closing)
	switch {
	case err != nil:
		return nil, true, m.notAcquired(c.ctx, c.t, c.try, c.start, lockError(c.op, c.t, err))
	case handed != nil:
		l, err = m.handedTo(c.ctx, c.t, handed, c.start)
		return l, true, err
	}
	return nil, false, nil
}
