package advisory

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory/internal/sockfd"
)

// enter registers a call in progress; the caller must call m.active.Done when it returns.
func (m *Manager) enter() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.active.Add(1)
	return nil
}

// track registers a session so Close can reach it. It fails once Close has begun.
func (m *Manager) track(s *pin) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return ErrClosed
	}
	m.sessions[s] = struct{}{}
	m.active.Add(1)
	return nil
}

// forget unregisters an ended session and gives back its pool reservation.
func (m *Manager) forget(s *pin) {
	m.mu.Lock()
	_, ok := m.sessions[s]
	delete(m.sessions, s)
	if ok {
		m.pinned--
		m.giveBack()
	}
	m.mu.Unlock()
	if ok {
		m.active.Done()
	}
}

// ownsBackend reports whether pid is the backend of one of this Manager's sessions other
// than except.
func (m *Manager) ownsBackend(pid uint32, except *pin) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range m.sessions {
		if s != except && s.pid == pid {
			return true
		}
	}
	return false
}

// holdsKey reports whether a Lock of this Manager other than p holds p's lock (its key
// and form) now (held), and whether one of those was given to goroutine g (self: see
// logWait).
func (m *Manager) holdsKey(p *pin, g uint64) (self, held bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for s := range m.sessions {
		if s != p && !s.multi && s.key == p.key && s.pair == p.pair && s.isHeld() {
			held = true
			self = self || g != 0 && s.holderG.Load() == g
		}
	}
	return self, held
}

// poolerFull says whether a Lock's holders query, behind a transaction pooler, that got
// no answer within poolTimeout waited in the pooler's queue for a server connection
// (full), and the record's attributes then: this Manager's sessions and holdings, its
// cap and poolFullHint. It did not if this Manager's own sessions take every connection
// of its pool (pool_max_conns): the query waited for one of those, which is this
// Manager's cap doing its work (see the sizing rule), not the pooler's pool running out.
func (m *Manager) poolerFull() (full bool, attrs []slog.Attr) {
	m.mu.Lock()
	sessions, held := len(m.sessions), 0
	for s := range m.sessions {
		if s.isHeld() {
			held++
		}
	}
	m.mu.Unlock()
	if sessions >= m.maxConns {
		return false, nil
	}
	return true, []slog.Attr{slog.Int("sessions", sessions), slog.Int("held", held),
		slog.Int("pool_max_conns", m.maxConns), slog.String("hint", poolFullHint)}
}

// poolFullHint is the advice of poolerFull's record (docs/guarantees.md, sizing behind a
// transaction pooler).
const poolFullHint = "no server connection of the pooler's pool was free within 1s: behind a transaction pooler " +
	"each held Lock keeps one server connection for as long as it is held and each waiting Lock one while it " +
	"waits, so holdings and waits can take the whole pool and starve the work under them; make the pooler's pool " +
	"(PgBouncer default_pool_size) larger than the locks held and waited for at once plus the work's connections, " +
	"or, where it cannot be resized, cap this Manager below it (pool_max_conns in the DSN)"

// reserve counts a connection this Manager is about to pin, for a call that began at
// start. With wait false it refuses when the Manager's own sessions (held locks, waits,
// calls about to run) already account for every pool connection. With wait true it then
// waits, in the order the calls began (see connWait), until one is given back, ctx ends
// (ErrPoolExhausted with ctx's error) or Close begins (ErrClosed); after an error
// nothing is counted. Connections being closed or opened by the pool do not count: one
// will be free in a moment.
func (m *Manager) reserve(ctx context.Context, wait bool, start time.Time) error {
	m.mu.Lock()
	if m.pinned < m.maxConns && len(m.connWaits) == 0 {
		m.pinned++
		m.mu.Unlock()
		return nil
	}
	if !wait {
		m.mu.Unlock()
		return fmt.Errorf("%w: all %d connections are pinned by this Manager's locks and waits",
			ErrPoolExhausted, m.maxConns)
	}
	w := &connWait{start: start, given: make(chan struct{})}
	i := len(m.connWaits)
	for i > 0 && m.connWaits[i-1].start.After(start) {
		i--
	}
	m.connWaits = slices.Insert(m.connWaits, i, w)
	m.connWaiting.Store(int32(len(m.connWaits)))
	m.mu.Unlock()
	if m.set.sharePer > 0 {
		m.hosts.release() // a shared session resting idle gives its connection to the waits
	}
	var err error
	select {
	case <-w.given:
		return nil
	case <-ctx.Done():
		err = m.exhausted(ctx)
	case <-m.closing:
		err = ErrClosed
	}
	m.mu.Lock()
	if isClosed(w.given) { // given just as the wait ended: pass it on
		m.pinned--
		m.giveBack()
	} else {
		m.connWaits = slices.DeleteFunc(m.connWaits, func(o *connWait) bool { return o == w })
		m.connWaiting.Store(int32(len(m.connWaits)))
	}
	m.mu.Unlock()
	return err
}

// A connWait is a call waiting in reserve for a connection its Manager's sessions pin.
// The waits are served in the order their calls began, not the order they asked: a Lock
// queued in the process behind another of its key (lock_queue.go) asks only when that
// one has the lock, and would otherwise go behind every call that asked meanwhile, in
// the pool's own queue (issue 47: at a fixed connection budget with hot keys, that
// second wait was the p99).
type connWait struct {
	start time.Time
	given chan struct{} // closed when the connection is counted for the call
}

// giveBack counts freed connections for the calls that wait for one, oldest first. Under
// m.mu. Every session's end calls it: with no call waiting it returns at once, writing
// nothing.
func (m *Manager) giveBack() {
	if len(m.connWaits) == 0 {
		return
	}
	for len(m.connWaits) > 0 && m.pinned < m.maxConns {
		w := m.connWaits[0]
		m.connWaits = m.connWaits[1:]
		m.pinned++
		close(w.given)
	}
	m.connWaiting.Store(int32(len(m.connWaits)))
}

// allPinned reports whether this Manager's sessions pin every pool connection now.
func (m *Manager) allPinned() bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pinned >= m.maxConns
}

func (m *Manager) unreserve() {
	m.mu.Lock()
	m.pinned--
	m.giveBack()
	m.mu.Unlock()
}

// pingDead is the pool's ShouldPing (after ping, the configuration's own, if any): an
// idle pooled connection whose backend was terminated (or whose server went away)
// already has the FATAL, or an EOF, waiting in its socket: ping it, which fails, so that
// the pool hands out another instead of a Lock meeting the FATAL. pgxpool pings by
// itself only connections idle for more than a second.
func pingDead(ping func(context.Context, pgxpool.ShouldPingParams) bool) func(context.Context, pgxpool.ShouldPingParams) bool {
	return func(ctx context.Context, p pgxpool.ShouldPingParams) bool {
		if pg := p.Conn.PgConn(); sockfd.Pending(pg.Conn(), connFD(pg)) {
			return true
		}
		if ping != nil {
			return ping(ctx, p)
		}
		return p.IdleDuration > time.Second
	}
}

// acquire takes a connection from the pool for a new session, for a call that began at
// start. With wait false it fails at once with ErrPoolExhausted when this Manager pins
// every connection; with wait true, calls that wait for one of them are served in the
// order they began (see reserve).
func (m *Manager) acquire(ctx context.Context, t target, wait bool, start time.Time) (*pin, error) {
	if m.set.sharePer > 0 && m.allPinned() {
		m.hosts.reclaim(ctx) // a shared session resting idle gives its connection back first
	}
	if err := m.reserve(ctx, wait, start); err != nil {
		return nil, err
	}
	pc, err := m.pool.Acquire(ctx)
	if err != nil {
		m.unreserve()
		err = m.acquireError(ctx, err)
		return nil, err
	}
	s := newPin(m, pc, t)
	if err := m.track(s); err != nil {
		pc.Release()
		m.unreserve()
		return nil, err
	}
	if s.gated {
		m.gates.sessionStarted(gateKey{s.key, s.pair})
	}
	return s, nil
}

func (m *Manager) acquireError(ctx context.Context, err error) error {
	m.mu.Lock()
	full := len(m.sessions) >= m.maxConns // every connection is a session of ours
	m.mu.Unlock()
	switch {
	case m.isClosed():
		return ErrClosed
	case ctx.Err() != nil && full:
		return m.exhausted(ctx)
	case ctx.Err() != nil && m.proxy.txPooled.Load():
		return fmt.Errorf("connect: waiting for the transaction pooler to run a new connection's set-up (each held "+
			"lock and each wait keeps one of its server connections): %w", ctx.Err())
	case ctx.Err() != nil:
		return fmt.Errorf("connect: %w", ctx.Err())
	}
	return &scrubbed{fmt.Errorf("connect: %w", err), []string{m.pool.Config().ConnConfig.Password}}
}

// exhausted is the error of a wait for a connection that ctx ended while this Manager's
// sessions pinned them all.
func (m *Manager) exhausted(ctx context.Context) error {
	return fmt.Errorf("%w: all %d connections stayed pinned by this Manager's locks and waits: %w",
		ErrPoolExhausted, m.maxConns, ctx.Err())
}
