package advisory

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// Leader observation. A holder that announces itself ([Lock.Publish], which Lead calls
// each time it becomes leader) sends NOTIFY on leaderChannel from its own session once it
// holds the lock, with the lock's identity as the payload; an announced Lock sends another
// when Unlock has released it. Each Manager with observers keeps one pool connection that
// LISTENs on the channel (the hub), and pokes the observers of the key named: they read the
// lock's holder again. A holder that ends without a word (killed, cut off, a plain Lock)
// is found by each observer's re-check, every WithLeaderRecheck interval. Nothing is
// trusted from a notification but "look again".

// leaderChannel is the NOTIFY channel of leadership changes, in every database.
const leaderChannel = "advisory_leader"

// DefaultLeaderRecheck is how often an observer reads the leader again when no
// notification comes, unless [WithLeaderRecheck] sets another interval.
const DefaultLeaderRecheck = time.Second

// leaderPayload is the NOTIFY payload for a lock: "k" or "p" (a [Pair] key) and the key in
// hex.
func leaderPayload(k gateKey) string {
	form := "k"
	if k.pair {
		form = "p"
	}
	return form + strconv.FormatUint(uint64(k.key), 16)
}

// parseLeaderPayload is leaderPayload's inverse; ok is false for anything else.
func parseLeaderPayload(s string) (gateKey, bool) {
	if len(s) < 2 || (s[0] != 'k' && s[0] != 'p') {
		return gateKey{}, false
	}
	v, err := strconv.ParseUint(s[1:], 16, 64)
	if err != nil {
		return gateKey{}, false
	}
	return gateKey{Key(v), s[0] == 'p'}, true
}

// Behind a transaction pooler no connection can LISTEN: a LISTEN registers on whichever
// server session runs it, and that session goes to other clients after the statement,
// with the notifications it receives. There observers read the leader every
// WithLeaderRecheck interval, and no hub runs (see subscribe).

// leaderHub is a Manager's LISTEN connection for its observers: it runs while at least
// one observer is subscribed.
type leaderHub struct {
	mu      sync.Mutex
	subs    map[gateKey]map[chan struct{}]struct{}
	stop    context.CancelFunc // ends the listening goroutine; nil when none runs
	stopped chan struct{}      // closed when that goroutine has returned
}

// subscribe registers poke for notifications about k, and starts the listening goroutine
// if none runs. The returned function unsubscribes; the last one to go stops the
// goroutine and waits for it.
func (m *Manager) subscribe(k gateKey, poke chan struct{}) func() {
	h := &m.leaders
	h.mu.Lock()
	if h.subs == nil {
		h.subs = make(map[gateKey]map[chan struct{}]struct{})
	}
	if h.subs[k] == nil {
		h.subs[k] = make(map[chan struct{}]struct{})
	}
	h.subs[k][poke] = struct{}{}
	if h.stop == nil && !m.proxy.txPooled.Load() { // see listening
		ctx, cancel := context.WithCancel(context.Background())
		h.stop, h.stopped = cancel, make(chan struct{})
		go m.listenLeaders(ctx, h.stopped)
	}
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete(h.subs[k], poke)
		if len(h.subs[k]) == 0 {
			delete(h.subs, k)
		}
		var stop context.CancelFunc
		var stopped chan struct{}
		if len(h.subs) == 0 && h.stop != nil {
			stop, stopped, h.stop = h.stop, h.stopped, nil
		}
		h.mu.Unlock()
		if stop != nil {
			stop()
			<-stopped
		}
	}
}

// pokeLeaders wakes the observers of k, or of every key if all is true. It does not
// block: a poke already pending covers this one.
func (m *Manager) pokeLeaders(k gateKey, all bool) {
	h := &m.leaders
	h.mu.Lock()
	defer h.mu.Unlock()
	for key, subs := range h.subs {
		if !all && key != k {
			continue
		}
		for poke := range subs {
			select {
			case poke <- struct{}{}:
			default:
			}
		}
	}
}

// listenLeaders LISTENs on leaderChannel until ctx ends or the Manager closes, and pokes
// the observers a notification names. After each (re)connection it pokes them all: a
// notification may have been missed while it was not listening. A failed connection is
// retried with a capped, jittered back-off; meanwhile observers re-check on their own.
func (m *Manager) listenLeaders(ctx context.Context, stopped chan struct{}) {
	defer close(stopped)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-m.closing:
			cancel()
		case <-ctx.Done():
		}
	}()
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		if m.listenLeadersOnce(ctx) {
			backoff = 100 * time.Millisecond
		}
		if !sleepCtx(ctx, jitter(backoff)) {
			return
		}
		backoff = min(2*backoff, 5*time.Second)
	}
}

// listenLeadersOnce listens on one connection until it fails or ctx ends. It reports
// whether it got as far as listening.
func (m *Manager) listenLeadersOnce(ctx context.Context) bool {
	if err := m.enter(); err != nil {
		return false
	}
	defer m.active.Done()
	pc, err := m.pool.Acquire(ctx)
	if err != nil {
		return false
	}
	ln := &listener{pc, m.set.heartbeat}
	if _, err := pc.Exec(ctx, "LISTEN "+leaderChannel); err != nil {
		ln.close(false)
		return false
	}
	m.pokeLeaders(gateKey{}, true)
	m.relayLeaders(ctx, ln)
	ln.close(ctx.Err() != nil) // a failed connection is closed; one that was told to stop, kept
	return true
}

// relayLeaders pokes observers for each notification on ln until an error (ctx's end
// included), which it returns.
func (m *Manager) relayLeaders(ctx context.Context, ln *listener) error {
	for {
		n, err := ln.notification(ctx)
		if err != nil {
			return err
		}
		if k, ok := parseLeaderPayload(n.Payload); ok && n.Channel == leaderChannel {
			m.pokeLeaders(k, false)
		}
	}
}

// announceReleased tells observers that an announced lock was released, once Unlock has
// returned, without making Unlock wait: an observer that misses it finds the change at
// its next re-check.
func (m *Manager) announceReleased(k gateKey) {
	if err := m.enter(); err != nil { // entered here, so that Close waits for the goroutine
		return
	}
	go m.sendNotify(leaderChannel, leaderPayload(k))
}

// observe is Observe's goroutine: it reads the leader of t at once, after each poke and
// every recheck interval, and sends each change on out until ctx ends or the Manager
// closes; then it closes out. The caller has entered the Manager (m.enter).
func (m *Manager) observe(ctx context.Context, t target, out chan Leader) {
	defer m.active.Done()
	defer close(out)
	k := gateKey{t.key, t.pair}
	poke := make(chan struct{}, 1)
	defer m.subscribe(k, poke)()
	tick := time.NewTimer(0)
	defer tick.Stop()
	var last Leader
	first := true
	for {
		select {
		case <-ctx.Done():
			return
		case <-m.closing:
			return
		case <-poke:
		case <-tick.C:
		}
		cur, err := m.readLeader(ctx, t, t.name)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			cur = Leader{Name: t.name, Key: t.key, Err: err}
		}
		if first || !cur.same(last) {
			first, last = false, cur
			sendLatest(out, cur)
		}
		tick.Reset(m.set.leaderRecheck)
	}
}

// sendLatest sends v on out, a channel of capacity 1 whose only sender is the caller,
// replacing a value the reader has not taken yet: a slow reader gets the latest.
func sendLatest(out chan Leader, v Leader) {
	select {
	case out <- v:
		return
	default:
	}
	select {
	case <-out:
	default:
	}
	out <- v
}

// same reports whether l and o describe the same leadership: the same session (pid and
// start), the same published value, or the same failure.
func (l Leader) same(o Leader) bool {
	if (l.Err != nil) != (o.Err != nil) {
		return false
	}
	if l.Err != nil {
		return l.Err.Error() == o.Err.Error()
	}
	return l.Elected == o.Elected && l.Holder.PID == o.Holder.PID &&
		l.Holder.BackendStart.Equal(o.Holder.BackendStart) && l.Value == o.Value &&
		l.Published.Equal(o.Published) && l.Waiting == o.Waiting
}
