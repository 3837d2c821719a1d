package advisory_test

import (
	"context"
	"testing"

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
// Like the other tests that make a standby of the shared server, it runs in parallel with
// the package's other tests: the standby streams through a replication slot of its own
// (pglocal), so a base backup taken while parallel tests write WAL fast (CREATE DATABASE)
// no longer fails with "requested WAL segment has already been removed", and on a tmpfs
// (pglocal.TempRoot) a base backup costs little CPU.
func TestHotStandbyIsRefused(t *testing.T) {
	t.Parallel()
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
				name, lp.PID(), ls.PID(), holdersAt(t, sb.DSN(), key))
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
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	sb := pgtest.StandbyForTest(t, srv)
	ctx := ctxT(t)
	require.NoError(t, sb.Promote(ctx))
	m, err := advisory.New(ctx, sb.DSN())
	require.NoError(t, err)
	defer m.Close()
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	assert.Equal(t, []uint32{l.PID()}, holdersAt(t, sb.DSN(), l.Key()))
	require.NoError(t, l.Unlock(ctx))
	assert.Empty(t, holdersAt(t, sb.DSN(), l.Key()))
}

// holdersAt returns the pids that hold key on the server at dsn (see pgtest.Holders).
func holdersAt(t testing.TB, dsn string, key advisory.Key) []uint32 {
	t.Helper()
	pids, err := pgtest.Holders(context.Background(), dsn, int64(key))
	require.NoError(t, err)
	return pids
}
