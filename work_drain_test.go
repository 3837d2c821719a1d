package advisory_test

import (
	"testing"

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
// earlier holder's session, the report returned with the error says it is still
// running, not terminated.
func TestDrainDoesNotReportARefusedTerminationAsDone(t *testing.T) {
	t.Parallel()
	name := t.Name()
	workPID, _ := lostWithWork(t, newManager(t, nil), name)
	role := tempRole(t)
	second := newManager(t, []string{"user=" + role, "password=pw"}, advisory.WithDrainWait(0))
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
