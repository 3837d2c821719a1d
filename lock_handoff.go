package advisory

import (
	"context"
	"errors"
	"time"

	"github.com/pgadvisory/advisory/internal/sockfd"
	"github.com/pgadvisory/advisory/internal/sockwatch"
)

// In-process handoff (see WithLocalHandoff). When a Lock of this Manager is unlocked while
// another goroutine's Lock of the same key is queued in the gate, the backend keeps the
// lock and the connection passes to the queued call: the old holding ends (its Lock's Err
// is ErrNotHeld, Done closes), then a new pin on the same connection becomes held and is
// watched, then the queued call wakes with it. No statement runs: the handoff costs a
// goroutine wake-up instead of an unlock, a grant and a wake-up on the server.
//
// The run of handoffs is bounded so that waiters in other processes, queued on the
// server, get their turn: at most handoffMax handoffs, and none later than handoffBudget
// after the backend took the lock from the server; then Unlock releases the lock on the
// server. The queued calls of this Manager go to the server only after that (see gate),
// so they queue behind every waiter that was already there.
//
// What each holding owns stays its own: the new pin has its own Done, Err, fencing token
// (Token bumps the key's counter again, on the same session: greater than the old
// holder's) and work tag (a different nonce on the same backend pid, which a drain counts
// as an earlier holding's). The old holder's statements on the connection are over: its
// Unlock waited for any BeginFunc, Token, drain or heartbeat, and hands off only while
// the poller watches the idle connection.

// eligible reports whether a Lock call for t takes part in handoffs: an exclusive Lock
// queued in the gate and reported to the caller (not a Semaphore's own call).
func (t target) eligible() bool { return t.gated && !t.shared && !t.quiet && !t.hidden }

// held records a lock taken from the server by a session that may hand it on: a run of
// handoffs begins.
func (gs *gates) held(p *pin) {
	if !p.handoff {
		return
	}
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[gateKey{p.key, p.pair}]
	g.holder, g.run, g.runStart = p, 0, time.Now()
}

// handOff picks the queued call that p's lock passes to, if the rules allow: p is the
// key's holder, no call of this Manager waits on the server, the queue's head takes
// handoffs, and the run is within its bound. It makes the head's session on p's
// connection (see successor) and takes the head off the queue; the caller must then end
// p, hold the new session and close the waiter's turn. It returns nil if p must release
// the lock on the server instead.
func (gs *gates) handOff(p *pin) *waiter {
	set := &p.m.set
	gs.mu.Lock()
	defer gs.mu.Unlock()
	g := gs.m[gateKey{p.key, p.pair}]
	if g == nil || g.holder != p || g.waiting || len(g.queue) == 0 || !g.queue[0].handoff ||
		g.run >= set.handoffMax || time.Since(g.runStart) >= set.handoffBudget {
		return nil
	}
	w := g.queue[0]
	n := p.successor(w.t)
	if n == nil {
		return nil
	}
	g.queue = g.queue[1:]
	g.holder, w.next = n, n
	g.run++
	return w
}

// successor makes the session of the next holding on p's connection, and puts it in p's
// place among the sessions Close reaches, with p's pool reservation. It returns nil once
// Close has begun. The new session starts settling, not acquiring: no statement runs that
// Close could interrupt.
func (p *pin) successor(t target) *pin {
	n := newPin(p.m, p.pc, t)
	n.state = stateSettling
	n.pid, n.vxid = p.pid, p.vxid // the same server session, and the same transaction if it is one
	n.grantedAt = p.grantedAt     // the same grant, as the server sees it
	if !p.m.succeed(p, n) {
		return nil
	}
	return n
}

// succeed replaces old with next among the Manager's sessions: the connection, and the
// call Close waits for, pass from one to the other. It fails once Close has begun.
func (m *Manager) succeed(old, next *pin) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return false
	}
	delete(m.sessions, old)
	m.sessions[next] = struct{}{}
	return true
}

// passOn hands p's lock to the next queued Lock call of this Manager, if the bound
// allows (see handOff). p's release has begun; its watcher still has the connection. It
// reports whether it did: p has then ended, without a statement; else nothing changed
// (the caller stops the watcher and unlocks as usual).
//
// The connection stays registered with the poller: the registration moves to the new
// pin (sockwatch.Watcher.Move), which is cheaper than removing and adding it, and leaves
// no instant unwatched. Only while the poller watches it (not a reader goroutine) is the
// connection certainly idle and unread. An idle held connection has nothing to read; if
// it has (a FATAL from pg_terminate_backend or a shutdown, an end of file, a notice),
// the lock is not passed on: the ordinary unlock reads it, and reports a loss to this
// holder. A loss still in flight, not yet received, reaches the next holder (its Done).
func (p *pin) passOn() bool {
	if !p.handoff || p.retire.Load() || !p.lease.keeps(p) || p.handle.announced.Load() {
		return false // a published holding's value must go with it: see withdrawValue
	}
	p.mu.Lock()
	if p.watch != watchPolled || p.closing || sockfd.Pending(p.pg.Conn(), p.fd) {
		p.mu.Unlock()
		return false
	}
	w := p.m.gates.handOff(p)
	if w == nil {
		p.mu.Unlock()
		return false
	}
	reg := p.polled
	p.polled = sockwatch.Registration{}
	p.watch = watchNone // a pending SocketEvent of p does nothing
	place := p.place
	p.place = nil
	held := w.next.holdMoved(reg, place)
	p.mu.Unlock()
	p.endAs(false, true, ErrNotHeld) // before the waiter returns: the old holding is over first
	if !held {
		w.next.giveUp() // Close began: the waiter returns ErrClosed (see handedTo)
	}
	close(w.turn)
	return true
}

// holdMoved makes a handed-off session held, with the registration of its connection
// (passOn hands off only a polled session) and its WithWaitSessions place moved to it;
// if the registration fired meanwhile, a reader goroutine reads what came. It refuses,
// with the connection unwatched, once Close has begun.
func (p *pin) holdMoved(reg sockwatch.Registration, place chan struct{}) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.place = place // given back with the connection, whoever holds it then
	p.polled = reg
	p.watch = watchPolled // before the move: an event after it finds p watching
	moved := !p.closing && p.m.poller.Move(reg, p)
	if !moved {
		p.m.poller.Remove(&p.polled)
		p.watch = watchNone
	}
	if p.closing {
		return false
	}
	p.heldSince = time.Now()
	p.state = stateHeld
	if !moved {
		p.startReader() // the registration fired: something came, read it
	}
	p.startBeat()
	return true
}

// giveUp releases on the server a lock handed to a session that Close refused to hold.
func (p *pin) giveUp() {
	p.hidden.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := p.unlock(ctx, true); err != nil { // handed on: no writes of its own
		p.end(false, ErrNotHeld)
		return
	}
	p.end(!p.retire.Load(), ErrNotHeld)
}

// refuse lets go of a lock handed to a call that ended first (ctx, Close): it is
// released as an Unlock releases it (passed on again, or on the server). No hook reports
// it: the caller never had it.
func (p *pin) refuse() {
	p.hidden.Store(true)
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	p.release(ctx, ErrNotHeld)
}

// handedTo ends a Lock call that was handed the held session p. The call fails, and the
// lock is let go, if ctx ended meanwhile (as a grant that raced a cancel is), or if Close
// kept p from being held.
func (m *Manager) handedTo(ctx context.Context, t target, p *pin, start time.Time) (*Lock, error) {
	err := ctx.Err()
	if err == nil && errors.Is(p.endErr(), ErrNotHeld) {
		err = ErrClosed
	}
	if err != nil {
		p.refuse()
		return nil, m.notAcquired(ctx, t, false, start, lockError("lock", t, err))
	}
	p.logAcquired(start)
	ev := p.event(time.Since(start), 0, "", nil)
	ev.Handoff = true
	m.fireAcquired(ev)
	return &p.handle, nil
}
