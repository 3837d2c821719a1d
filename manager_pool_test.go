package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/pgadvisory/advisory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPoolExhausted(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"pool_max_conns=1"})
	ctx := ctxT(t)
	held, err := m.Lock(ctx, t.Name()+"/a")
	require.NoError(t, err)

	start := time.Now()
	_, err = m.TryLock(ctx, t.Name()+"/b")
	require.ErrorIs(t, err, advisory.ErrPoolExhausted)
	assert.Less(t, time.Since(start), time.Second, "TryLock does not wait for a connection")

	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = m.Lock(wctx, t.Name()+"/b")
	require.ErrorIs(t, err, advisory.ErrPoolExhausted)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "1 connections")

	require.NoError(t, held.Unlock(ctx))
	l, err := m.Lock(ctx, t.Name()+"/b")
	require.NoError(t, err, "works again once a connection is free")
	require.NoError(t, l.Unlock(ctx))
}

func TestDefaultPoolSize(t *testing.T) {
	t.Parallel()
	assert.EqualValues(t, advisory.DefaultMaxConns, newManager(t, nil).Stat().MaxConns())
	assert.EqualValues(t, 3, newManager(t, []string{"pool_max_conns=3"}).Stat().MaxConns())
	// Decided by parsing, not by a substring anywhere in the string.
	assert.EqualValues(t, advisory.DefaultMaxConns,
		newManager(t, []string{"application_name=pool_max_conns_probe"}).Stat().MaxConns())
}

// A pooled idle connection whose backend was terminated while it sat in the pool is not
// handed to the next Lock: that Lock used to meet the FATAL waiting in the socket and
// fail with a bare 57P01 (found by TestModel).
func TestPooledConnectionTerminatedWhileIdleIsReplaced(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"pool_max_conns=1"})
	ctx := ctxT(t)
	for i := 0; i < 5; i++ {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		pid := l.PID()
		require.NoError(t, l.Unlock(ctx)) // the connection goes back to the pool, idle
		terminate(t, pid)
		eventually(t, 10*time.Second, func() bool { return !backendListed(t, pid) }, "backend %d gone", pid)
		for _, try := range []func(context.Context, string) (*advisory.Lock, error){m.Lock, m.TryLock} {
			l, err = try(ctx, t.Name())
			require.NoError(t, err, "round %d: the next call gets a live connection", i)
			require.NotEqual(t, pid, l.PID())
			require.NoError(t, l.Unlock(ctx))
		}
	}
}

func backendListed(t testing.TB, pid uint32) bool {
	var n int
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $1", int32(pid)).Scan(&n))
	return n > 0
}
