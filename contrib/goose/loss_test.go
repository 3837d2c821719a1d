package advgoose_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advgoose "github.com/pgadvisory/advisory/contrib/goose"
)

// The lock's session is terminated while migration 2 runs: the ctx from Locker.Context is
// cancelled with the loss as its cause, goose stops the migration and rolls its
// transaction back, and Up returns an error carrying the loss. Migration 1 stays applied;
// nothing of migration 2 is.
func TestLossCancelsTheMigration(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			dsn, admin := database(t)
			lk := advgoose.New(newManager(t, dsn), "migrations")
			p := newProvider(t, slow(dsn, 60, "loser"), lk, mode.session)
			ctx, cancel := lk.Context(context.Background())
			defer cancel()
			done := make(chan error, 1)
			go func() { _, err := p.Up(ctx); done <- err }()

			waitFor(t, "migration 2 sleeping", func() bool {
				return count(t, admin, `SELECT count(*) FROM pg_stat_activity
					WHERE state = 'active' AND query LIKE '%pg_sleep%' AND pid <> pg_backend_pid()`) == 1
			})
			held := lk.Held()
			require.NotNil(t, held)
			require.Equal(t, 1, count(t, admin, "SELECT count(*) FROM (SELECT pg_terminate_backend($1)) t", int32(held.PID())))
			terminated := time.Now()
			var err error
			select {
			case err = <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("Up went on for 10 s after the loss")
			}
			t.Logf("Up returned %v after the terminate: %v", time.Since(terminated), err)
			require.ErrorIs(t, err, advisory.ErrLockLost)
			require.ErrorIs(t, context.Cause(ctx), advisory.ErrLockLost)
			require.Nil(t, lk.Held())

			apps := appliedOnce(t, admin)
			require.Equal(t, []int{1}, keys(apps), "only migration 1 applied")
			require.Zero(t, count(t, admin, "SELECT count(*) FROM goose_db_version WHERE version_id >= 2"))
			require.Zero(t, count(t, admin, `SELECT count(*) FROM information_schema.columns
				WHERE table_name = 'items' AND column_name = 'price'`), "migration 2's ALTER rolled back")
		})
	}
}

// A Context made after the loss, while the lost holding is not yet unlocked, is
// cancelled at once; one made after the Unlock is not.
func TestContextAfterTheLoss(t *testing.T) {
	dsn, admin := database(t)
	lk := advgoose.New(newManager(t, dsn), "migrations")
	ctx := context.Background()
	require.NoError(t, lk.Lock(ctx, nil))
	require.Equal(t, 1, count(t, admin, "SELECT count(*) FROM (SELECT pg_terminate_backend($1)) t", int32(lk.Held().PID())))
	<-lk.Held().Done()
	c, cancel := lk.Context(ctx)
	defer cancel()
	require.ErrorIs(t, context.Cause(c), advisory.ErrLockLost)
	require.ErrorIs(t, lk.Unlock(ctx, nil), advisory.ErrLockLost)
	require.ErrorIs(t, lk.Unlock(ctx, nil), advisory.ErrNotHeld)
	c2, cancel2 := lk.Context(ctx)
	defer cancel2()
	require.NoError(t, c2.Err())
}

// SessionUnlock gives goose's connection its application_name back, and a Locker holds one
// lock at a time: a second Lock waits for the first's Unlock, bounded by its ctx.
func TestSessionUnlockRestoresTheConnection(t *testing.T) {
	dsn, _ := database(t)
	lk := advgoose.New(newManager(t, dsn), "migrations")
	ctx := context.Background()
	conn, err := openDB(t, slow(dsn, 0, "mine")).Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	app := func() (s string) {
		require.NoError(t, conn.QueryRowContext(ctx, "SELECT current_setting('application_name')").Scan(&s))
		return s
	}
	require.NoError(t, lk.SessionLock(ctx, conn))
	require.Equal(t, lk.Held().WorkAppName("mine"), app())
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, lk.Lock(short, nil), context.DeadlineExceeded)
	require.ErrorIs(t, lk.Unlock(ctx, nil), advisory.ErrNotHeld, "not taken by Lock")
	require.NoError(t, lk.SessionUnlock(ctx, conn))
	require.Equal(t, "mine", app())
	require.ErrorIs(t, lk.SessionUnlock(ctx, conn), advisory.ErrNotHeld)
}

func keys(m map[int]string) []int {
	var ks []int
	for k := range m {
		ks = append(ks, k)
	}
	return ks
}

// A Lock whose ctx ends while another holder has the lock returns ctx's error and leaves
// nothing held or waiting on the server; the Locker can lock again afterwards.
func TestLockWaitEndsWithCtx(t *testing.T) {
	dsn, admin := database(t)
	m := newManager(t, dsn)
	other, err := m.Lock(context.Background(), "migrations")
	require.NoError(t, err)
	lk := advgoose.New(newManager(t, dsn), "migrations")
	short, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, lk.Lock(short, nil), context.DeadlineExceeded)
	require.Nil(t, lk.Held())
	require.Zero(t, count(t, admin, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted"))
	require.NoError(t, other.Unlock(context.Background()))
	require.NoError(t, lk.Lock(context.Background(), nil))
	require.NoError(t, lk.Unlock(context.Background(), nil))
}
