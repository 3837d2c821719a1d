package advisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestBeginFuncDoneCtxKeepsTheLock: Lock.BeginFunc and Session.BeginFunc with a ctx that has already ended return ctx's error without running fn, and the lock
// stays held (pgx closes a connection whose BEGIN fails with a client-side error, such as
// "context already done": that must not be how the call ends).
func TestBeginFuncDoneCtxKeepsTheLock(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	S, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, S.Lock(ctx, t.Name()+"/s"))
	done, cancel := context.WithCancel(ctx)
	cancel()
	ran := false
	fn := func(pgx.Tx) error { ran = true; return nil }
	for i := 0; i < 3; i++ {
		err = l.BeginFunc(done, fn)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, advisory.ErrLockLost)
		require.NoError(t, l.Err())
		err = S.BeginFunc(done, fn)
		require.ErrorIs(t, err, context.Canceled)
		require.NotErrorIs(t, err, advisory.ErrLockLost)
		require.NoError(t, S.Err())
	}
	require.False(t, ran)
	requireHeldBy(t, l.Key(), l.PID())
	requireHeldBy(t, advisory.KeyOf(t.Name()+"/s"), S.PID())
	require.NoError(t, l.BeginFunc(ctx, fn), "the connection is still usable")
	require.True(t, ran)
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, S.Close(ctx))
	requireNoAcquired(t, m)
}
