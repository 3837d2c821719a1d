package advisory

import (
	"slices"
	"time"
)

// The places of WithWaitSessions (see shared_wait.go). A place is a value in the
// Manager's waitPlaces: a Lock takes one by sending, and the session that used it gives
// it back (givePlace) once its connection is back in the pool. A place given back goes
// first to the parked Locks that a queue overtook (a session waits in the server's
// queue for their key, so their tries are refused: see parkPatience), oldest first, and
// only then to the other parked Locks, in the order they asked. Before, a Lock overtaken
// so waited on a session of its own beyond the places at once: in a fleet whose hot keys
// are always queued for, that took a replica 1-4 sessions past its budget, and the
// overtaken Lock waited its turn among Locks that could still win by a try.

// firstPlace is a parked Lock's standing in the queue for the next place given back,
// once a queue has overtaken it: handed receives the place (nil before).
type firstPlace struct {
	handed chan struct{}
	since  time.Time
}

// overdue puts the Lock, which a queue overtakes, first for the next place given back,
// and reports whether it has stood there parkPatience already with none given back:
// then it waits on a session of its own, beyond the places (a place may be kept for a
// long holding, and the Lock must not starve).
func (f *firstPlace) overdue(hs *hostSet) bool {
	if f.handed == nil {
		f.handed, f.since = make(chan struct{}, 1), time.Now()
		hs.mu.Lock()
		hs.first = append(hs.first, f.handed)
		hs.mu.Unlock()
		return false
	}
	return time.Since(f.since) >= parkPatience
}

// leave takes a Lock that no longer waits for a place out of the queue; a place handed
// to it meanwhile goes on to the next.
func (f *firstPlace) leave(hs *hostSet) {
	if f.handed == nil {
		return
	}
	hs.mu.Lock()
	if i := slices.Index(hs.first, f.handed); i >= 0 {
		hs.first = slices.Delete(hs.first, i, i+1)
		hs.mu.Unlock()
		return
	}
	hs.mu.Unlock()
	<-f.handed // givePlace took it out of the queue: its place comes at once
	hs.givePlace(hs.waitPlaces)
}

// givePlace gives back a place: to the oldest Lock waiting first for one, which keeps
// it (its value stays in places), else to places, where the next Lock takes it.
func (hs *hostSet) givePlace(places chan struct{}) {
	hs.mu.Lock()
	if len(hs.first) > 0 {
		next := hs.first[0]
		hs.first = hs.first[1:]
		hs.mu.Unlock()
		next <- struct{}{} // buffered: never blocks
		return
	}
	hs.mu.Unlock()
	<-places
}

// holdPlace gives the session that holds a lock the WithWaitSessions place its Lock
// waited on (nil: none), to give back with its connection (see endAs); if the session
// has ended already, the place goes back now.
func (p *pin) holdPlace(place chan struct{}) {
	if place == nil {
		return
	}
	p.mu.Lock()
	if p.state != stateEnded {
		p.place = place
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.m.hosts.givePlace(place)
}

// leavePlace gives back the call's place if no session that holds the lock kept it.
func (c *lockCall) leavePlace(hs *hostSet) {
	if c.place != nil {
		hs.givePlace(c.place)
	}
}
