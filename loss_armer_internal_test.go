//go:build linux

package advisory

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// armerManager is a Manager whose armer ticks every delay instead of armDelay, and an
// admin pool. A delay far longer than the test makes "registered at the tick" and
// "released before it" certain, whatever the machine's load.
func armerManager(t *testing.T, delay time.Duration, opts ...Option) (*Manager, *pgxpool.Pool) {
	t.Helper()
	m, admin := internalManager(t, opts...)
	require.NotNil(t, m.armer, "Linux has a poller, so an armer")
	m.armer.close() // nothing is held yet
	m.armer = newArmer(delay)
	return m, admin
}

func watchOf(p *pin) watchMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watch
}

// A lock released before the armer's tick never touches the epoll set: Lock, LockKey, a
// handoff and a Session's calls alike. Without the armer, the same calls register each
// holding (the control: the count can move).
func TestShortHoldingsNeverRegisterWithThePoller(t *testing.T) {
	m, admin := armerManager(t, time.Hour, WithLocalHandoff(16, time.Second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := m.poller.Registered()
	for range 20 {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		require.Equal(t, watchArming, watchOf(l.s), "held, queued in the armer")
		requireHeldByPID(t, admin, l.Key(), l.PID())
		require.NoError(t, l.Unlock(ctx))
		k, err := m.LockKey(ctx, KeyOf(t.Name()+"/key"))
		require.NoError(t, err)
		require.NoError(t, k.Unlock(ctx))
	}
	// A handoff passes the armer's place on, with no registration either.
	l1, err := m.Lock(ctx, t.Name()+"/handoff")
	require.NoError(t, err)
	got := make(chan *Lock, 1)
	go func() {
		l, _ := m.Lock(ctx, t.Name()+"/handoff")
		got <- l
	}()
	require.Eventually(t, func() bool { return QueuedForTest(m, l1.Key()) == 1 }, 10*time.Second, time.Millisecond)
	require.NoError(t, l1.Unlock(ctx))
	l2 := <-got
	require.NotNil(t, l2)
	require.Equal(t, l1.PID(), l2.PID(), "handed off on the same backend")
	require.Equal(t, watchArming, watchOf(l2.s), "the new holding waits in the armer")
	requireHeldByPID(t, admin, l2.Key(), l2.PID())
	require.NoError(t, l2.Unlock(ctx))
	S, err := m.Session(ctx)
	require.NoError(t, err)
	for range 5 {
		require.NoError(t, S.Lock(ctx, t.Name()+"/session"))
		require.NoError(t, S.Unlock(ctx, t.Name()+"/session"))
	}
	require.NoError(t, S.Close(ctx))
	assert.Equal(t, before, m.poller.Registered(), "no holding was registered")
	assert.Zero(t, locksOn(t, admin, t.Name(), t.Name()+"/key", t.Name()+"/handoff", t.Name()+"/session"),
		"every lock released on the server")

	m.armer.close() // the control: without the armer, each holding is registered at once
	m.armer = nil
	for range 3 {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		require.Equal(t, watchPolled, watchOf(l.s))
		require.NoError(t, l.Unlock(ctx))
	}
	assert.Equal(t, before+3, m.poller.Registered())
}

// A loss while the holding waits in the armer is seen at the armer's tick (epoll reports
// what came before the registration at once), and an Unlock before the tick reads the
// loss itself.
func TestLossWhileQueuedInTheArmer(t *testing.T) {
	const delay = 2 * time.Second
	m, admin := armerManager(t, delay)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	held := time.Now()
	terminateBackend(t, admin, l.PID())
	requireBackendGone(t, admin, l.PID())
	if watchOf(l.s) == watchArming { // nothing watches the socket yet
		select {
		case <-l.Done():
			t.Fatal("Done closed while nothing watched the connection")
		default:
		}
	}
	requireDoneSoon(t, l, "a loss while queued in the armer")
	assert.GreaterOrEqual(t, time.Since(held), delay-100*time.Millisecond, "seen at the tick, not before")
	assert.Contains(t, l.Err().Error(), "terminated")

	u, err := m.Lock(ctx, t.Name()+"/unlock")
	require.NoError(t, err)
	terminateBackend(t, admin, u.PID())
	requireBackendGone(t, admin, u.PID())
	require.Equal(t, watchArming, watchOf(u.s))
	require.ErrorIs(t, u.Unlock(ctx), ErrLockLost, "Unlock reads the loss itself")
	assert.Zero(t, locksOn(t, admin, t.Name(), t.Name()+"/unlock"))
}

// TestArmerTicksThroughSteadyTraffic (issue 47): after a tick that armed steadyBatch
// sessions or more, the armer keeps ticking instead of parking, so a Lock held meanwhile
// is armed at the next tick without waking the armer's goroutine itself; a tick that
// finds fewer parks it.
func TestArmerTicksThroughSteadyTraffic(t *testing.T) {
	// It waits out four ticks of its own Manager's armer, idle: in parallel with the rest.
	t.Parallel()
	// The Locks must be queued within a tick of each other: a delay far longer than a
	// Lock, whatever the machine's load.
	m, _ := armerManager(t, 3*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { return m.armer.parks.Load() == 1 }, 10*time.Second, time.Millisecond, "parked, nothing queued")
	var held []*Lock
	lock := func() *Lock {
		l, err := m.Lock(ctx, t.Name()+"/"+strconv.Itoa(len(held)))
		require.NoError(t, err)
		held = append(held, l)
		return l
	}
	armed := func(l *Lock) {
		require.Eventually(t, func() bool { return watchOf(l.s) == watchPolled }, 10*time.Second, time.Millisecond)
	}
	for range 2 { // two ticks that arm two sessions each: steady traffic
		a, b := lock(), lock()
		armed(a)
		armed(b)
	}
	assert.Equal(t, int64(1), m.armer.parks.Load(), "the armer parked between two ticks that armed two sessions each")
	require.Eventually(t, func() bool { return m.armer.parks.Load() == 2 }, 10*time.Second, time.Millisecond,
		"parked after a tick that found none")
	for _, l := range held {
		require.NoError(t, l.Unlock(ctx))
	}
}

func requireHeldByPID(t *testing.T, admin *pgxpool.Pool, key Key, pid uint32) {
	t.Helper()
	var holder uint32
	require.NoError(t, admin.QueryRow(context.Background(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory'
		AND granted AND classid = $1 AND objid = $2 AND objsubid = 1`, uint32(uint64(key)>>32), uint32(key)).Scan(&holder))
	require.Equal(t, pid, holder)
}

func requireBackendGone(t *testing.T, admin *pgxpool.Pool, pid uint32) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		err := admin.QueryRow(context.Background(), "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n)
		return err == nil && n == 0
	}, 10*time.Second, time.Millisecond, "backend %d gone", pid)
}

// locksOn counts the advisory locks held or awaited on the keys of names.
func locksOn(t *testing.T, admin *pgxpool.Pool, names ...string) int {
	t.Helper()
	n := 0
	for _, name := range names {
		k := KeyOf(name)
		var c int
		require.NoError(t, admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND classid = $1 AND objid = $2 AND objsubid = 1`, uint32(uint64(k)>>32), uint32(k)).Scan(&c))
		n += c
	}
	return n
}
