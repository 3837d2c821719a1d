package advisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestHotStandbyIsRefused reproduces issue 9's standby defect against a real streaming
// standby (pgtest.StartStandby): advisory locks on a hot standby are local to it, so a
// Manager there would "hold" a key that a Manager on the primary holds too. New on a
// standby must fail with ErrStandby.
//
// Like the other tests that start servers or background load (standbys, PgBouncers), it
// does not run in parallel with the package's other tests: on two cores its load would
// stretch their timings.
func TestHotStandbyIsRefused(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	sb := pgtest.StandbyForTest(t, srv)
	ctx := ctxT(t)
	name, key := t.Name(), advisory.KeyOf(t.Name())
	lp, err := newManager(t, nil).Lock(ctx, name)
	require.NoError(t, err)
	requireHeldBy(t, key, lp.PID())

	m, err := advisory.New(ctx, sb.DSN())
	if err == nil {
		defer m.Close()
		ls, err := m.TryLock(ctx, name)
		if err == nil {
			t.Errorf("two holders of %q: pid %d on the primary and pid %d on the standby (standby's pg_locks: %v)",
				name, lp.PID(), ls.PID(), standbyHolders(t, sb, key))
			ls.Unlock(ctx)
		} else {
			t.Logf("TryLock on the standby: %v", err)
		}
	}
	require.ErrorIs(t, err, advisory.ErrStandby, "New on a hot standby")
	requireHeldBy(t, key, lp.PID())
}

// TestPromotedStandbyTakesLocks: once promoted, the former standby is a primary, and locks
// on it work (New, Lock, pg_locks on that server).
func TestPromotedStandbyTakesLocks(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	sb := pgtest.StandbyForTest(t, srv)
	ctx := ctxT(t)
	require.NoError(t, sb.Promote(ctx))
	m, err := advisory.New(ctx, sb.DSN())
	require.NoError(t, err)
	defer m.Close()
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	assert.Equal(t, []uint32{l.PID()}, standbyHolders(t, sb, l.Key()))
	require.NoError(t, l.Unlock(ctx))
	assert.Empty(t, standbyHolders(t, sb, l.Key()))
}

// standbyHolders returns the pids holding key on the standby's own lock table.
func standbyHolders(t testing.TB, sb *pgtest.Standby, key advisory.Key) []uint32 {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), sb.DSN())
	require.NoError(t, err)
	defer conn.Close(context.Background())
	rows, err := conn.Query(context.Background(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory'
		AND granted AND objsubid = 1 AND classid = $1 AND objid = $2`, uint32(uint64(key)>>32), uint32(key))
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
	require.NoError(t, err)
	return pids
}
