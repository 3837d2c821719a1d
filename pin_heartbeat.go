package advisory

import (
	"context"
	"fmt"
	"time"
)

// The heartbeat (WithHeartbeat) keeps a held session from looking idle to whatever ends
// idle sessions between the holder and the server. It is one timer per held pin, armed
// when the loss watcher starts watching it (see armBeat) and re-armed by each
// beat: no goroutine of its own, and nothing at all when
// the option is off. A beat takes the connection from the watcher as a transaction or
// a drain does (beginTx, endTxAs), and a Session's turn first, so that it never overlaps
// anything else on the connection; it skips, rather than waits, when the connection is
// busy.

// minHeartbeat is the shortest heartbeat period WithHeartbeat accepts.
const minHeartbeat = 100 * time.Millisecond

// maxHeartbeat is the longest. A sliced wait runs under lock_timeout = the heartbeat (see
// pin_slices.go), and PostgreSQL refuses a lock_timeout over 2147483647 ms (24.8 days):
// 720h passed New and then failed every waiting Lock. A day is far inside that bound, and
// far longer than any idle limit a heartbeat is for.
const maxHeartbeat = 24 * time.Hour

// heartbeatSQL is the beat's statement: one simple-protocol round trip that never waits
// on the server. It returns the backend's pid, which must be the holding's: a beat that
// finds another (a transaction pooler that no longer keeps the client on the holding's
// server session) reports the holding lost.
const heartbeatSQL = "SELECT pg_catalog.pg_backend_pid()"

// armBeat arms the heartbeat's timer (the Manager has one: see startBeat), unless it is
// armed or the session is not held: the first beat comes a period after the holding
// began (heldSince). The caller holds p.mu: the timer's function reads p.beat under it.
func (p *pin) armBeat() {
	if p.beat != nil || p.state != stateHeld || p.closing {
		return
	}
	p.beat = time.AfterFunc(max(p.m.set.heartbeat-time.Since(p.heldSince), 0), p.heartbeat)
}

// heartbeat is one beat, run by the timer. It re-arms the timer unless the session ended
// or is ending.
func (p *pin) heartbeat() {
	if p.turn != nil { // a Session: its calls take the connection without beginTx
		select {
		case p.turn <- struct{}{}:
			defer func() { <-p.turn }()
		default:
			p.nextBeat() // a call is running: it kept the connection busy
			return
		}
	}
	if p.idleHeld() && !p.beatOnce() {
		return // the beat ended the session
	}
	p.nextBeat()
}

// idleHeld reports whether the session is held with nothing running on its connection.
func (p *pin) idleHeld() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state == stateHeld && !p.closing
}

// beatOnce sends heartbeatSQL on the connection, taken from the watcher for it. The
// statement runs under a timeout of its own (cleanupTimeout, as a drain's): it never
// waits on the server, so only a stalled network can reach it, and the keepalive bounds
// that too. It reports false if the session ended: a failure that left the connection
// unusable is reported as the loss, as the watcher would report it (see endTxAs).
func (p *pin) beatOnce() bool {
	ctx, cancel := context.WithTimeout(context.Background(), beatTimeout)
	defer cancel()
	if err := p.beginTx(ctx); err != nil {
		return p.endErr() == nil // not held after all (a release began): skip this beat
	}
	// A beat that got no answer in time ends the holding at once: no CancelRequest and
	// its grace (see WithCancelGrace), which would tell the holder of a frozen server
	// only after the grace too, later than Bounds.HeartbeatTold.
	p.cancel.SetGentle(false)
	rows, err := p.pg.Exec(ctx, p.named(heartbeatSQL)).ReadAll()
	var pid uint32
	if err == nil {
		pid, err = oneNumber(rows, "the heartbeat")
	}
	if err != nil && ctx.Err() != nil {
		err = &silentBeat{err} // no answer in time: the path to the server went silent
	}
	if err == nil && pid != p.pid {
		err = fmt.Errorf("%w: the heartbeat ran on backend pid %d, not the holding's (pid %d)", ErrPooler, pid, p.pid)
		p.discard() // the holding's server session is out of reach: let it go
	}
	return p.endTxAs(err, " (seen by the heartbeat)") == nil
}

// nextBeat re-arms the timer, unless the session ended or Close began.
func (p *pin) nextBeat() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state != stateEnded && !p.closing {
		p.beat.Reset(p.m.set.heartbeat)
	}
}

// silentBeat is the cause of a loss seen as a heartbeat that got no answer within
// beatTimeout: the network between the holder, a proxy and the server went silent (behind
// a transaction pooler, the only sign of a cut between the pooler and the server).
type silentBeat struct{ err error }

func (e *silentBeat) Error() string {
	return "the heartbeat got no answer within " + beatTimeout.String() + ": " + e.err.Error()
}

func (e *silentBeat) Unwrap() error { return e.err }
