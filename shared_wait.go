package advisory

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"time"
)

// Waits without a session (WithWaitSessions). Under WithSharedSessions a Lock whose key
// is taken waits on a session of its own, in the server's queue for the key, and then
// holds the lock there. With WithWaitSessions(n), at most n of the Manager's sessions
// are such sessions at once: a Lock takes a place to wait, and its session keeps it
// until the connection goes back to the pool (a handoff passes it on with the session).
// A Lock without a place parks: it holds no connection, and tries its key again on a
// shared session, after a pause of a quarter of its wait so far, until it gets the key,
// a place frees (places are given in the order the parked Locks asked, but see
// shared_wait_places.go), or its ctx ends; a release by a Lock of its own Manager wakes it
// to try at once (wakeParked). A parked Lock never takes a key before a waiter in the
// server's queue: PostgreSQL refuses a try while anyone waits for the key. So that a key
// always queued for (handed over through the server's queue) does not starve it, a Lock
// parked for parkPatience asks whether a session waits for its key, and if one does goes
// first for the next place, or after parkPatience more without one waits on a session
// of its own, beyond the places: the places bound the waits that cost nothing but time.

// A parked Lock's pause before its next try is a quarter of how long it has been parked,
// from parkFirst to parkLongest: a release is noticed within about a quarter of the wait
// so far, and a long wait costs few tries (about 4 per doubling of the wait). The try is
// then put off to the Manager's next parkTick, so that the tries of its parked Locks go
// in few shared-session statements, not one each: the Manager's ticks have a phase of
// their own, so that Managers do not all try at the same instants.
const (
	parkFirst   = 2 * time.Millisecond
	parkLongest = time.Second
	parkShare   = 4
	parkTick    = 8 * time.Millisecond
	// parkPatience: a Lock parked this long asks, after each try it is refused (its tries
	// are then 250 ms to 1 s apart), whether a session waits in the server's queue for its
	// key; if one does, it goes first for the next place given back (see
	// shared_wait_places.go), and if none is within parkPatience more, it waits on a
	// session of its own, beyond WithWaitSessions' places. PostgreSQL refuses a try while
	// any session waits for the key, so a parked Lock of a key that others hand over
	// through the server's queue would otherwise never be granted.
	parkPatience = time.Second
)

// parkPause is the pause, from now, of a Lock parked since parked: until the tick after
// its varied share of the wait.
func (hs *hostSet) parkPause(parked, now time.Time) time.Duration {
	due := now.Add(varied(min(max(now.Sub(parked)/parkShare, parkFirst), parkLongest))).UnixNano()
	if off := (due - hs.parkPhase) % int64(parkTick); off != 0 {
		due += int64(parkTick) - off
	}
	return time.Duration(due - now.UnixNano())
}

// park is a shared Lock's wait for t's key, found taken, under WithWaitSessions. It
// returns the Lock if a try on a shared session took the key; or the place it took to
// wait on a session of its own (a value sent on places: the caller gives it to the
// session that holds the lock, see holdPlace, or takes it back); or the reason the wait
// ended: ctx's error, ErrClosed, a shared session's failure.
func (m *Manager) park(ctx context.Context, t target, start time.Time) (*Lock, chan struct{}, error) {
	places := m.hosts.waitPlaces
	select {
	case places <- struct{}{}:
		return nil, places, nil
	default:
	}
	if c := m.set.parkedCount; c != nil {
		c.Add(1)
	}
	k := gateKey{t.key, t.pair}
	wake := m.hosts.park(k)
	defer m.hosts.unpark(k, wake)
	if m.set.logger != nil {
		m.set.logger.Debug("advisory: lock waits without a session (every WithWaitSessions place is taken)",
			slog.String("lock", describe(t.key, t.name, t.pair)), slog.Int("places", cap(places)))
	}
	parked := time.Now()
	timer := time.NewTimer(m.hosts.parkPause(parked, parked))
	defer timer.Stop()
	var first firstPlace // once a queue has overtaken it (see parkPatience)
	defer first.leave(&m.hosts)
	for {
		select {
		case places <- struct{}{}:
			return nil, places, nil
		case <-first.handed:
			first.handed = nil
			return nil, places, nil
		case <-ctx.Done():
			return nil, nil, ctx.Err()
		case <-m.closing:
			return nil, nil, ErrClosed
		case <-timer.C:
		case <-wake: // this Manager released the key: try now, in the next batch
			timer.Stop()
		}
		l, err := m.takeShared(ctx, t, true)
		var locked *LockedError
		switch {
		case l != nil:
			m.sharedAcquired(t, false, start)
			return l, nil, nil
		case err != nil && !errors.As(err, &locked):
			return nil, nil, err
		}
		if m.outwaited(t, parked, &first) {
			return nil, nil, nil // a wait on a session of its own, beyond the places
		}
		timer.Reset(m.hosts.parkPause(parked, time.Now()))
	}
}

// outwaited reports whether a Lock parked since parked, just refused a try, stops
// parking to wait on a session of its own beyond the places (see parkPatience): past
// parkPatience with a session queued for its key, it first goes first for a place, and
// stops only past parkPatience more without one. Once first, it does not ask again: a
// queue that overtook it is likely to stay, and each question reads the whole of
// pg_locks.
func (m *Manager) outwaited(t target, parked time.Time, first *firstPlace) bool {
	since := time.Since(parked)
	if since < parkPatience || first.handed == nil && !m.hosts.queued(t) || !first.overdue(&m.hosts) {
		return false
	}
	m.overtaken(t, since)
	return true
}

// overtaken logs a parked Lock that stops parking because a session waits in the
// server's queue for its key (see parkPatience).
func (m *Manager) overtaken(t target, parked time.Duration) {
	if m.set.logger != nil {
		m.set.logger.Debug("advisory: a parked lock waits on a session of its own, beyond WithWaitSessions' places: "+
			"another session waits for the key, and a try is refused while one does",
			slog.String("lock", describe(t.key, t.name, t.pair)), slog.Duration("parked", parked.Round(time.Millisecond)))
	}
}

// queuedSQL reports whether a session waits in the server's queue for the advisory lock
// $1 (its bigint form) of the current database.
const queuedSQL = `SELECT EXISTS (SELECT FROM pg_catalog.pg_locks l
WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND NOT l.granted AND l.objsubid OPERATOR(pg_catalog.=) 1
  AND l.database OPERATOR(pg_catalog.=) (SELECT d.oid FROM pg_catalog.pg_database d
    WHERE d.datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
  AND (l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32 OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8)
    OPERATOR(pg_catalog.=) $1)`

// queued reports whether a session waits in the server's queue for t's key, asked on one
// of the Manager's shared sessions (a parked Lock keeps one open); false if none is open,
// or the question failed.
func (hs *hostSet) queued(t target) bool {
	hs.mu.Lock()
	var h *host
	for _, c := range hs.hosts {
		if !c.gone && c.s != nil {
			h = c
			break
		}
	}
	if h != nil {
		h.busy++ // not given back meanwhile
	}
	hs.mu.Unlock()
	if h == nil {
		return false
	}
	defer hs.done(h, gateKey{}, nil, false)
	q, err := h.queued(t.key)
	return err == nil && q
}

// queued runs queuedSQL for k on the host's turn, bounded by cleanupTimeout as its
// batches are.
func (h *host) queued(k Key) (bool, error) {
	s := h.s
	if err := s.enterCall(context.Background()); err != nil {
		return false, err
	}
	defer s.leaveCall()
	var q bool
	err := s.op(context.Background(), func() error {
		p := s.pin
		conn := p.pg.Conn()
		conn.SetDeadline(time.Now().Add(cleanupTimeout))
		defer conn.SetDeadline(time.Time{})
		err := p.pc.QueryRow(context.Background(), queuedSQL, int64(k)).Scan(&q)
		if err != nil && !usable(p.pg, err) {
			return &connFailure{err} // the host is lost
		}
		return err
	})
	return q, err
}

// park counts a parked Lock of k: while any is, the Manager keeps a shared session open
// for their tries even if it holds nothing, instead of opening one and giving it back at
// every tick. It returns the channel that wakes the Lock when this Manager releases k
// (see wakeParked); nil if another Lock is parked for k already (a shared-mode Lock: the
// exclusive ones are queued one at a time per key, see gate), which then only polls.
func (hs *hostSet) park(k gateKey) chan struct{} {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.parked++
	if _, ok := hs.parkedFor[k]; ok {
		return nil
	}
	if hs.parkedFor == nil {
		hs.parkedFor = make(map[gateKey]chan struct{})
	}
	wake := make(chan struct{}, 1)
	hs.parkedFor[k] = wake
	return wake
}

// wakeParked wakes the Lock parked for k, if any, to try at once: a holding of this
// Manager has just released k. Without it, the Lock would learn of the release only at
// its next try, up to a quarter of its wait later, while the key lay free or went to
// another process's try; woken, it tries in the next batch. A waiter in the server's
// queue still goes first: the server granted it k at the release, and refuses the try.
func (hs *hostSet) wakeParked(k gateKey) {
	hs.mu.Lock()
	wake := hs.parkedFor[k]
	hs.mu.Unlock()
	if wake != nil {
		select {
		case wake <- struct{}{}:
		default: // woken already
		}
	}
}

// unpark counts a parked Lock of k out (wake: what park returned), and lets the shared
// sessions left idle rest (see rest).
func (hs *hostSet) unpark(k gateKey, wake chan struct{}) {
	hs.mu.Lock()
	hs.parked--
	if wake != nil {
		delete(hs.parkedFor, k)
	}
	for _, h := range hs.hosts {
		hs.rest(h)
	}
	hs.mu.Unlock()
}

// varied is d, give or take up to a half, so that the Locks parked for one key in many
// processes do not all try at the same instant.
func varied(d time.Duration) time.Duration {
	return d/2 + rand.N(d)
}

// parkRoute gives a Lock under WithWaitSessions a place to wait on a session of its own
// (c.place, which the session that gets the lock keeps: see ownAcquired), or parks it
// without a session until it takes the lock on a shared session (served), or fails.
func (m *Manager) parkRoute(c *lockCall) (l *Lock, served bool, err error) {
	l, place, err := m.park(c.ctx, c.t, c.start)
	switch {
	case l != nil:
		return l, true, nil
	case err != nil:
		return nil, true, m.notAcquired(c.ctx, c.t, c.try, c.start, lockError(c.op, c.t, err))
	}
	c.place = place
	return nil, false, nil
}
