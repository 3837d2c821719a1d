//go:build linux

package advisory

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A holding is watched from its grant (issue 47): every way a session becomes held (Lock,
// LockKey, TryLock, an in-process handoff, a Session's Lock) returns with the poller
// watching its socket and, with a heartbeat, the heartbeat's timer armed. Before, a
// holding waited up to a millisecond for a timer's tick to be registered, and a session
// ended in that millisecond went unseen until then.

func watchOf(p *pin) watchMode {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.watch
}

func beatOf(p *pin) *time.Timer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.beat
}

// requireWatchedNow fails unless p is watched by the poller and beating at once: no
// wait, no Eventually.
func requireWatchedNow(t *testing.T, p *pin, what string) {
	t.Helper()
	require.Equal(t, watchPolled, watchOf(p), "%s: the poller watches it from the grant", what)
	require.NotNil(t, beatOf(p), "%s: its heartbeat is armed from the grant", what)
}

func TestHoldingIsWatchedFromItsGrant(t *testing.T) {
	t.Parallel()
	m, admin := internalManager(t, WithLocalHandoff(16, time.Second), WithHeartbeat(minHeartbeat))
	require.NotNil(t, m.poller, "Linux has a poller")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := m.poller.Registered()

	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	requireWatchedNow(t, l.s, "Lock")
	require.NoError(t, l.Unlock(ctx))
	k, err := m.LockKey(ctx, KeyOf(t.Name()+"/key"))
	require.NoError(t, err)
	requireWatchedNow(t, k.s, "LockKey")
	require.NoError(t, k.Unlock(ctx))
	tl, err := m.TryLock(ctx, t.Name()+"/try")
	require.NoError(t, err)
	requireWatchedNow(t, tl.s, "TryLock")
	require.NoError(t, tl.Unlock(ctx))
	assert.Equal(t, before+3, m.poller.Registered(), "each holding registered once")

	// A handoff moves the registration: the new holding is watched at once, with no new
	// registration, and beats.
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
	requireWatchedNow(t, l2.s, "a handoff")
	assert.Equal(t, before+4, m.poller.Registered(), "the registration moved with the handoff")
	requireBeat(t, admin, l2.PID())
	require.NoError(t, l2.Unlock(ctx))

	S, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, S.Lock(ctx, t.Name()+"/session"))
	requireWatchedNow(t, S.pin, "a Session's Lock")
	require.NoError(t, S.Close(ctx))
}

// A session ended right after its grant is told at once, and the Unlock after it reports
// the loss: there is no instant in which the holding is not watched. Each round
// terminates the backend in the same goroutine that Lock returned to, before anything
// else runs.
func TestLossRightAfterTheGrantIsTold(t *testing.T) {
	t.Parallel()
	m, admin := internalManager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for i := range 10 {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		require.Equal(t, watchPolled, watchOf(l.s), "round %d: watched from the grant", i)
		terminateBackend(t, admin, l.PID())
		requireDoneSoon(t, l, "a loss right after the grant")
		assert.Contains(t, l.Err().Error(), "terminated")
		require.ErrorIs(t, l.Unlock(ctx), ErrLockLost)
	}
}

// requireBeat waits until the backend pid has run the heartbeat's statement.
func requireBeat(t *testing.T, admin *pgxpool.Pool, pid uint32) {
	t.Helper()
	require.Eventually(t, func() bool {
		var q string
		err := admin.QueryRow(context.Background(), "SELECT query FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&q)
		return err == nil && strings.HasSuffix(q, heartbeatSQL)
	}, 10*time.Second, 5*time.Millisecond, "backend %d beat", pid)
}
