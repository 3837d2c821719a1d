package advisory

import (
	"context"
	"fmt"
	"sync"
)

// A gate queues a Manager's exclusive Lock calls for one key. Two rules, so that N
// goroutines contending for a key are served first come first served and pin at most
// gateSlots connections:
//
//   - one call at a time waits on the server (the others wait here, in order): the server
//     sees them one by one, in queue order;
//   - the next call may start waiting only while fewer than gateSlots sessions of the key
//     exist (the holder's, and the waiter's), counting a session until its connection is
//     back in the pool.
type gate struct {
	waiting  bool            // a call is waiting on the server
	sessions int             // gated sessions of this key that exist
	queue    []chan struct{} // queued calls, oldest first; closed to let one in
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

// enter blocks until the caller may wait on the server for k, or ctx ends (it returns
// ctx's error), or closed is closed (ErrClosed). After nil, the caller must call
// stopWaiting when its lock statement has returned.
func (gs *gates) enter(ctx context.Context, k gateKey, closed <-chan struct{}) error {
	gs.mu.Lock()
	g := gs.get(k)
	if !g.waiting && g.sessions < gateSlots && len(g.queue) == 0 {
		g.waiting = true
		gs.mu.Unlock()
		return nil
	}
	turn := make(chan struct{})
	g.queue = append(g.queue, turn)
	gs.mu.Unlock()
	var err error
	select {
	case <-turn:
		return nil
	case <-ctx.Done():
		err = fmt.Errorf("queued behind another Lock of this key in this process: %w", ctx.Err())
	case <-closed:
		err = ErrClosed
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	select {
	case <-turn: // let in just as the wait ended: give the turn to the next call
		g.waiting = false
	default:
		for i, w := range g.queue {
			if w == turn {
				g.queue = append(g.queue[:i], g.queue[i+1:]...)
				break
			}
		}
	}
	gs.advance(k, g)
	return err
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

func (gs *gates) sessionEnded(k gateKey) {
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[k]
	g.sessions--
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
	if !g.waiting && g.sessions < gateSlots && len(g.queue) > 0 {
		g.waiting = true
		close(g.queue[0])
		g.queue = g.queue[1:]
	}
	if !g.waiting && g.sessions == 0 && len(g.queue) == 0 {
		delete(gs.m, k)
		*g = gate{}
		gs.spare = g
	}
}
