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
	a, err := advgocron.NewElector(newManager(t), name)
	require.NoError(t, err)
	t.Cleanup(a.Close)
	b, err := advgocron.NewElector(newManager(t), name)
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

func TestElectorBadInput(t *testing.T) {
	t.Parallel()
	_, err := advgocron.NewElector(newManager(t), "")
	require.ErrorIs(t, err, advisory.ErrInvalidKey)
	require.Panics(t, func() { advgocron.NewElector(nil, "x") })

	m := newManager(t)
	e, err := advgocron.NewElector(m, t.Name())
	require.NoError(t, err)
	m.Close()
	eventually(t, 10*time.Second, func() bool {
		return e.IsLeader(context.Background()) != nil && e.IsLeader(context.Background()) != advgocron.ErrNotLeader
	}, "stopped after the Manager closed")
	require.ErrorIs(t, e.IsLeader(context.Background()), advisory.ErrClosed)
	e.Close()
}
