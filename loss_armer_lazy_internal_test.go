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

// The armer's laziness (issue 47): a holding released before the armer's tick wakes
// nothing (no tick, no timer left set, no heartbeat timer), and every guarantee of one
// held past the tick stays: it is watched, a loss is told, and it beats.

func armerState(a *armer) (set, ticking bool, arming int) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.set, a.ticking, a.arming
}

func beatOf(p *pin) *time.Timer {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.beat
}

// sparse makes the armer's next queue come as if more than a delay after the last that
// set its timer.
func sparse(a *armer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.lastSet = time.Time{}
}

// A Lock + Unlock within the armer's delay, in sparse traffic, sets its timer at the Lock
// and stops it at the Unlock: the armer's goroutine never ticks, and no heartbeat timer
// is made. In steady traffic (a second Lock within a delay of the first) the timer stays
// set: the armer ticks through it instead of a timer set per Lock.
func TestShortHoldingsWakeNoArmer(t *testing.T) {
	m, _ := armerManager(t, time.Hour, WithHeartbeat(minHeartbeat))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 20 {
		sparse(m.armer)
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		set, _, arming := armerState(m.armer)
		require.True(t, set, "the first queued holding sets the timer")
		require.Equal(t, 1, arming)
		require.Nil(t, beatOf(l.s), "the heartbeat waits for the armer's tick")
		require.NoError(t, l.Unlock(ctx))
		set, _, arming = armerState(m.armer)
		require.False(t, set, "the last holding to leave stops the timer")
		require.Zero(t, arming)
	}
	assert.Zero(t, m.armer.ticks.Load(), "the armer never ticked")

	for range 2 {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	set, ticking, _ := armerState(m.armer)
	assert.True(t, ticking, "two Locks within a delay: steady traffic")
	assert.True(t, set, "the timer stays set through steady traffic")
}

// A holding released while another still waits for the tick leaves the timer set: the
// other is registered at the tick, starts its heartbeat, and a loss is told.
func TestArmerTicksForTheHoldingLeftQueued(t *testing.T) {
	const delay = 300 * time.Millisecond
	m, admin := armerManager(t, delay, WithHeartbeat(minHeartbeat))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sparse(m.armer)
	short, err := m.Lock(ctx, t.Name()+"/short")
	require.NoError(t, err)
	kept, err := m.Lock(ctx, t.Name()+"/kept")
	require.NoError(t, err)
	require.NoError(t, short.Unlock(ctx))
	set, _, arming := armerState(m.armer)
	require.True(t, set, "one holding still waits for the tick")
	require.Equal(t, 1, arming)
	require.Eventually(t, func() bool { return watchOf(kept.s) == watchPolled }, 10*time.Second, time.Millisecond,
		"registered at the tick")
	require.NotNil(t, beatOf(kept.s), "the tick starts the heartbeat")
	requireBeat(t, admin, kept.PID())
	terminateBackend(t, admin, kept.PID())
	requireDoneSoon(t, kept, "a holding registered after another left the armer")
}

// A holding lost right after its grant, before the armer's tick, is told at the tick,
// though a holding queued with it was released first (the timer stays set for it).
func TestLossBeforeTheTickAfterAnotherLeft(t *testing.T) {
	const delay = time.Second
	m, admin := armerManager(t, delay)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lost, err := m.Lock(ctx, t.Name()+"/lost")
	require.NoError(t, err)
	short, err := m.Lock(ctx, t.Name()+"/short")
	require.NoError(t, err)
	require.NoError(t, short.Unlock(ctx))
	terminateBackend(t, admin, lost.PID())
	requireDoneSoon(t, lost, "a loss before the tick")
	assert.Contains(t, lost.Err().Error(), "terminated")
}

// A heartbeat started late keeps the schedule of one started at the grant: the first
// beat comes a period after the holding began, at once if the tick came later than that.
func TestLateHeartbeatKeepsItsSchedule(t *testing.T) {
	m, admin := armerManager(t, 3*minHeartbeat, WithHeartbeat(minHeartbeat))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	requireBeat(t, admin, l.PID())
	assert.Less(t, time.Since(l.s.heldSince), 3*minHeartbeat+5*time.Second, "beat soon after the tick")
	require.NoError(t, l.Unlock(ctx))
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
