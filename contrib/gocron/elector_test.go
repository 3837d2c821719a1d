package advgocron_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advgocron "github.com/pgadvisory/advisory/contrib/gocron"
)

// TestElectorFailsOver: of two electors exactly one leads; when its session is
// terminated the other leads; Close stops campaigning and frees the lock.
func TestElectorFailsOver(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	a, err := advgocron.NewElector(newManager(t), name, 0)
	require.NoError(t, err)
	t.Cleanup(a.Close)
	b, err := advgocron.NewElector(newManager(t), name, 0)
	require.NoError(t, err)
	t.Cleanup(b.Close)

	// Before any failover exactly one leads. (During one, an observer in a third place can
	// see both answer nil for a moment: the old leader is told of the loss before the
	// server frees the lock, but its process may take longer to act on the news than the
	// new leader's takes to win.)
	var first, second *advgocron.Elector
	eventually(t, 10*time.Second, func() bool {
		ea, eb := a.IsLeader(ctx), b.IsLeader(ctx)
		require.False(t, ea == nil && eb == nil, "two leaders at once")
		switch {
		case ea == nil:
			first, second = a, b
		case eb == nil:
			first, second = b, a
		default:
			return false
		}
		return true
	}, "a leader")
	require.ErrorIs(t, second.IsLeader(ctx), advgocron.ErrNotLeader)
	pids := holders(t, name)
	require.Len(t, pids, 1)

	terminate(t, pids[0])
	eventually(t, 10*time.Second, func() bool { return first.IsLeader(ctx) != nil }, "the old leader stops leading")
	eventually(t, 10*time.Second, func() bool { return second.IsLeader(ctx) == nil }, "failover")
	require.ErrorIs(t, first.IsLeader(ctx), advgocron.ErrNotLeader)

	second.Close()
	require.ErrorIs(t, second.IsLeader(ctx), context.Canceled)
	eventually(t, 10*time.Second, func() bool { return first.IsLeader(ctx) == nil }, "the first leads again")
	first.Close()
	first.Close() // a second Close is fine
	require.ErrorIs(t, first.IsLeader(ctx), context.Canceled)
	require.Empty(t, holders(t, name))
}

// TestElectorCloseKeepsTheHandoverHold: a leader closing right after it let a job run
// keeps the lock, and refuses runs, until the hold has passed since that run; the other
// replica leads only then. A leader that let no run within the hold hands over at once.
func TestElectorCloseKeepsTheHandoverHold(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	const hold = 1500 * time.Millisecond
	a, err := advgocron.NewElector(newManager(t), name, hold)
	require.NoError(t, err)
	t.Cleanup(a.Close)
	var ran time.Time // just before the IsLeader that allowed a run
	eventually(t, 10*time.Second, func() bool { ran = time.Now(); return a.IsLeader(ctx) == nil }, "a leads")
	b, err := advgocron.NewElector(newManager(t), name, hold)
	require.NoError(t, err)
	t.Cleanup(b.Close)

	closed := make(chan time.Time, 1)
	go func() { a.Close(); closed <- time.Now() }()
	eventually(t, 10*time.Second, func() bool { return a.IsLeader(ctx) != nil }, "a refuses runs once Close began")
	require.ErrorIs(t, a.IsLeader(ctx), advgocron.ErrNotLeader, "during the hold")
	require.ErrorIs(t, b.IsLeader(ctx), advgocron.ErrNotLeader, "b leads during a's hold")
	require.Len(t, holders(t, name), 1, "a still holds the lock during its hold")
	at := <-closed
	require.GreaterOrEqual(t, at.Sub(ran), hold, "Close returned before the hold since the run")
	require.ErrorIs(t, a.IsLeader(ctx), context.Canceled)
	eventually(t, 10*time.Second, func() bool { return b.IsLeader(ctx) == nil }, "b leads after the hold")

	// b let a run just now (IsLeader above), but with no run since, a Close after the
	// hold hands over at once.
	time.Sleep(hold)
	began := time.Now()
	b.Close()
	require.Less(t, time.Since(began), hold, "Close waited with no run within the hold")
	require.Empty(t, holders(t, name))
	t.Logf("Close returned %v after the run, for a hold of %v", at.Sub(ran), hold)
}

func TestElectorBadInput(t *testing.T) {
	t.Parallel()
	_, err := advgocron.NewElector(newManager(t), "", 0)
	require.ErrorIs(t, err, advisory.ErrInvalidKey)
	_, err = advgocron.NewElector(newManager(t), "x", -time.Second)
	require.ErrorIs(t, err, advisory.ErrInvalidOption)
	require.Panics(t, func() { advgocron.NewElector(nil, "x", 0) })

	m := newManager(t)
	e, err := advgocron.NewElector(m, t.Name(), 0)
	require.NoError(t, err)
	m.Close()
	eventually(t, 10*time.Second, func() bool {
		return e.IsLeader(context.Background()) != nil && e.IsLeader(context.Background()) != advgocron.ErrNotLeader
	}, "stopped after the Manager closed")
	require.ErrorIs(t, e.IsLeader(context.Background()), advisory.ErrClosed)
	e.Close()
}
