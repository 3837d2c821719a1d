package advisory_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestDrainKeepsTheLockNameVisible: Holders reads a lock's name from its session's last
// statement; the drain's statements on the lock's connection must keep it there, after
// an empty drain and after one that terminated an earlier holder's work.
func TestDrainKeepsTheLockNameVisible(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil)
	lostWithWork(t, first, name)
	l, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	for i := 0; i < 2; i++ {
		report, err := l.Drain(ctxT(t))
		require.NoError(t, err)
		assert.Len(t, report.Sessions, 1-i)
		hs, err := second.Holders(ctxT(t), name)
		require.NoError(t, err)
		require.Len(t, hs, 1)
		assert.Equal(t, name, hs[0].Name, "drain %d", i)
	}
	require.NoError(t, l.Unlock(ctxT(t)))
}

// TestDrainDoesNotReportARefusedTerminationAsDone: when the role may not terminate an
// earlier holder's session (of a role WithWorkRoles names), the report returned with the
// error says it is still running, not terminated.
func TestDrainDoesNotReportARefusedTerminationAsDone(t *testing.T) {
	t.Parallel()
	name := t.Name()
	workPID, _ := lostWithWork(t, newManager(t, nil), name)
	role := tempRole(t)
	second := newManager(t, []string{"user=" + role, "password=pw"}, advisory.WithDrainWait(0),
		advisory.WithWorkRoles(superuser(t)))
	l, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	report, err := l.Drain(ctxT(t))
	require.ErrorIs(t, err, advisory.ErrWorkNotDrained)
	require.Len(t, report.Sessions, 1)
	assert.Equal(t, workPID, report.Sessions[0].PID)
	assert.False(t, report.Sessions[0].Terminated, "the termination was refused")
	assert.Zero(t, report.Sessions[0].After, "the session still runs")
	require.NoError(t, l.Unlock(ctxT(t)))
	terminate(t, workPID)
}

// TestDrainReportsAndSparesItsOwnWork: Drain terminates an earlier holding's session
// after the drain wait, reports it, and leaves the current holding's own work alone.
func TestDrainReportsAndSparesItsOwnWork(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithDrainWait(200*time.Millisecond))
	workPID, _ := lostWithWork(t, first, name)
	l, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	own := workConn(t, l, "")
	start := time.Now()
	report, err := l.Drain(ctxT(t))
	require.NoError(t, err)
	require.Len(t, report.Sessions, 1, "%+v", report)
	ds := report.Sessions[0]
	assert.Equal(t, workPID, ds.PID)
	assert.True(t, ds.Terminated, "a sleeping transaction does not end on its own")
	assert.GreaterOrEqual(t, ds.After, 200*time.Millisecond, "terminated before the drain wait")
	assert.GreaterOrEqual(t, time.Since(start), ds.After)
	assert.True(t, strings.HasPrefix(ds.ApplicationName, "pgadv/"), ds.ApplicationName)
	assert.Equal(t, "active", ds.State)
	require.True(t, backendGone(t, workPID))
	require.NoError(t, own.Ping(ctxT(t)), "the holding's own work connection was touched")
	again, err := l.Drain(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, again.Sessions)
	requireHeldBy(t, advisory.KeyOf(name), l.PID())
	require.NoError(t, l.Unlock(ctxT(t)))
}

// TestDrainWaitsForSessionsThatEndOnTheirOwn: a session whose client goes away within
// the drain wait is not terminated.
func TestDrainWaitsForSessionsThatEndOnTheirOwn(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithDrainWait(30*time.Second))
	l1, err := first.Lock(ctxT(t), name)
	require.NoError(t, err)
	c := workConn(t, l1, "")
	workPID := c.PgConn().PID()
	require.NoError(t, l1.Unlock(ctxT(t)))
	l2, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	time.AfterFunc(300*time.Millisecond, func() { c.Close(context.Background()) })
	report, err := l2.Drain(ctxT(t))
	require.NoError(t, err)
	require.Len(t, report.Sessions, 1)
	assert.False(t, report.Sessions[0].Terminated, "ended on its own")
	assert.Equal(t, workPID, report.Sessions[0].PID)
	assert.Less(t, report.Took, 30*time.Second)
	require.NoError(t, l2.Unlock(ctxT(t)))
}

// TestDrainSparesSharedHoldersThatStillHold: a shared holder's work is drained by
// another shared holder only once the first no longer holds the lock.
func TestDrainSparesSharedHoldersThatStillHold(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithDrainWait(0))
	a, err := first.LockShared(ctxT(t), name)
	require.NoError(t, err)
	workPID, _ := slowWork(t, workConn(t, a, ""), t.Name())
	b, err := second.LockShared(ctxT(t), name)
	require.NoError(t, err)
	report, err := b.Drain(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, report.Sessions, "a co-holder's work was drained")
	require.False(t, backendGone(t, workPID))
	require.NoError(t, a.Unlock(ctxT(t)))
	report, err = b.Drain(ctxT(t))
	require.NoError(t, err)
	require.Len(t, report.Sessions, 1)
	assert.Equal(t, workPID, report.Sessions[0].PID)
	require.True(t, backendGone(t, workPID))
	require.NoError(t, b.Unlock(ctxT(t)))
}

// TestDrainIsScopedToTheLock: work tagged for another key, or another holding on the
// same backend's earlier lock, is told apart by the tag.
func TestDrainIsScopedToTheLock(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithDrainWait(0))
	other, err := m.Lock(ctxT(t), t.Name()+"/other")
	require.NoError(t, err)
	otherPID, _ := slowWork(t, workConn(t, other, ""), t.Name()+"/other")
	l, err := m.Lock(ctxT(t), t.Name())
	require.NoError(t, err)
	report, err := l.Drain(ctxT(t))
	require.NoError(t, err)
	assert.Empty(t, report.Sessions)
	require.False(t, backendGone(t, otherPID))
	require.NoError(t, l.Unlock(ctxT(t)))
	require.NoError(t, other.Unlock(ctxT(t)))
}

// TestDrainWithoutPrivilegeStartsNothing: a role that may not terminate the earlier
// holder's session (a superuser's, whose role WithWorkRoles names) gets ErrWorkNotDrained
// naming the privilege; Do does not call fn and leaves the lock free.
func TestDrainWithoutPrivilegeStartsNothing(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first := newManager(t, nil)
	workPID, _ := lostWithWork(t, first, name)
	role := tempRole(t)
	second := newManager(t, []string{"user=" + role, "password=pw"}, advisory.WithDrainWait(0),
		advisory.WithWorkRoles(superuser(t)))
	err := second.Do(ctxT(t), name, func(ctx context.Context) error {
		t.Error("fn ran while an earlier holder's work still runs")
		return nil
	})
	require.ErrorIs(t, err, advisory.ErrWorkNotDrained)
	assert.Contains(t, err.Error(), "GRANT pg_signal_backend TO")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "42501", pgErr.Code)
	require.False(t, backendGone(t, workPID))
	requireFree(t, advisory.KeyOf(name))
	requireNoAcquired(t, second)
	terminate(t, workPID)
}

// TestDrainSeesWorkStartedMeanwhile: sessions that appear while the drain waits are
// drained too.
func TestDrainSeesWorkStartedMeanwhile(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), newManager(t, nil, advisory.WithDrainWait(500*time.Millisecond))
	l1, err := first.Lock(ctxT(t), name)
	require.NoError(t, err)
	early := workConn(t, l1, "")
	tagged, err := l1.WorkConnString(dsn(t))
	require.NoError(t, err)
	terminate(t, l1.PID())
	<-l1.Done()
	l2, err := second.Lock(ctxT(t), name)
	require.NoError(t, err)
	var late *pgx.Conn
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // a connection of the earlier holding opened after the drain began
		defer wg.Done()
		time.Sleep(100 * time.Millisecond)
		late, err = pgx.Connect(context.Background(), tagged)
	}()
	report, derr := l2.Drain(ctxT(t))
	wg.Wait()
	require.NoError(t, err)
	defer late.Close(context.Background())
	require.NoError(t, derr)
	pids := []uint32{}
	for _, s := range report.Sessions {
		pids = append(pids, s.PID)
	}
	assert.ElementsMatch(t, []uint32{early.PgConn().PID(), late.PgConn().PID()}, pids)
	require.NoError(t, l2.Unlock(ctxT(t)))
}
