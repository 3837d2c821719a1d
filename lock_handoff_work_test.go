package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestHandoffWorkFencingAndTheConnection: across a handoff, the old holder's tagged work
// is drained by the new holder (same backend pid, another nonce), the old Lock makes no
// new work connection, the new Lock's BeginFunc runs on its backend, and a Lock whose
// socket was handed to File is never handed off (its connection is retired).
func TestHandoffWorkFencingAndTheConnection(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithLocalHandoff(16, time.Second), advisory.WithDrainWait(0))
	ctx := ctxT(t)
	name := t.Name()
	l1, err := m.Lock(ctx, name)
	require.NoError(t, err)
	work, err := l1.WorkConnString(dsn(t))
	require.NoError(t, err)
	old, err := pgx.Connect(ctx, work) // the old holder's work, still running at the handoff
	require.NoError(t, err)
	defer old.Close(context.Background())
	var oldPID uint32
	require.NoError(t, old.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&oldPID))

	got := lockAsync(ctx, m, name)
	queued(t, m, l1.Key(), 1)
	require.NoError(t, l1.Unlock(ctx))
	l2 := <-got
	require.NotNil(t, l2)
	require.Equal(t, l1.PID(), l2.PID())
	cfg, err := pgx.ParseConfig(dsn(t))
	require.NoError(t, err)
	l1.WorkConfig(&cfg.Config) // its AfterConnect asks the server, then the Lock
	_, err = pgx.ConnectConfig(ctx, cfg)
	require.ErrorIs(t, err, advisory.ErrNotHeld, "the old holding makes no new work connection")

	// The refused connection's backend started before AfterConnect refused it, and exits
	// only once pgx's close reaches it: wait for that, so that the old holder's work is
	// the one session of its tag left for the drain to find.
	eventually(t, 10*time.Second, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE application_name =
			(SELECT application_name FROM pg_stat_activity WHERE pid = $1)`, int32(oldPID)).Scan(&n))
		return n == 1
	}, "the refused work connection's backend is gone")
	report, err := l2.Drain(ctx)
	require.NoError(t, err)
	require.Len(t, report.Sessions, 1, "the old holder's work, on the same lock backend")
	assert.Equal(t, oldPID, report.Sessions[0].PID)
	assert.True(t, report.Sessions[0].Terminated)
	require.NoError(t, l2.BeginFunc(ctx, func(tx pgx.Tx) error {
		var pid uint32
		require.NoError(t, tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid))
		assert.Equal(t, l2.PID(), pid)
		return nil
	}))

	f, err := l2.File()
	require.NoError(t, err)
	f.Close()
	got = lockAsync(ctx, m, name)
	queued(t, m, l2.Key(), 1)
	require.NoError(t, l2.Unlock(ctx))
	l3 := <-got
	require.NotNil(t, l3)
	assert.NotEqual(t, l2.PID(), l3.PID(), "a retired connection is released on the server, not handed off")
	requireHeldBy(t, l3.Key(), l3.PID())
	require.NoError(t, l3.Unlock(ctx))
	requireNoAcquired(t, m)
}
