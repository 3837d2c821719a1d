package advisory_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// Where re-entry cannot be honoured, a clear error at once (ErrNotReentrant), never a
// wait for the caller itself.

// refusedCalls are the lock calls of m on name, exclusive, each returning its error.
func refusedCalls(m *advisory.Manager, name string) map[string]func(ctx context.Context) error {
	fn := func(context.Context) error { return nil }
	return map[string]func(ctx context.Context) error{
		"Lock":    func(ctx context.Context) error { _, err := m.Lock(ctx, name); return err },
		"TryLock": func(ctx context.Context) error { _, err := m.TryLock(ctx, name); return err },
		"Do":      func(ctx context.Context) error { return m.Do(ctx, name, fn) },
		"DoTx": func(ctx context.Context) error {
			return m.DoTx(ctx, name, func(context.Context, pgx.Tx) error { return nil })
		},
		"TryDo": func(ctx context.Context) error {
			ran, err := m.TryDo(ctx, name, 0, fn)
			if ran {
				return fmt.Errorf("TryDo ran fn (err %v)", err)
			}
			return err
		},
	}
}

// requireRefused requires every call to fail at once with ErrNotReentrant.
func requireRefused(t *testing.T, ctx context.Context, why string, calls map[string]func(ctx context.Context) error) {
	t.Helper()
	for what, call := range calls {
		_, err := atOnce(t, ctx, what, func(ctx context.Context) (struct{}, error) { return struct{}{}, call(ctx) })
		require.ErrorIs(t, err, advisory.ErrNotReentrant, "%s %s", what, why)
		require.NotErrorIs(t, err, advisory.ErrLocked, "%s %s: nobody else holds it", what, why)
		require.Len(t, libraryPrefix.FindAllString(err.Error(), -1), 1, "one prefix: %v", err)
	}
}

// TestExclusiveUnderASharedHoldingIsRefused: an exclusive call under a shared holding of
// the same lock would wait for that holding: ErrNotReentrant. A shared call re-enters it,
// and so does a shared call under an exclusive holding.
func TestExclusiveUnderASharedHoldingIsRefused(t *testing.T) {
	forEachHolding(t, func(t *testing.T, m *advisory.Manager) {
		ctx, name := ctxT(t), t.Name()
		shared, err := m.LockShared(ctx, name)
		require.NoError(t, err)
		under := advisory.ContextWithLock(ctx, shared)
		requireRefused(t, under, "under a shared holding", refusedCalls(m, name))
		l, err := atOnce(t, under, "LockShared", func(ctx context.Context) (*advisory.Lock, error) { return m.LockShared(ctx, name) })
		require.NoError(t, err)
		require.True(t, l.Reentered())
		require.True(t, l.Shared())
		require.NoError(t, l.Unlock(ctx))
		require.NoError(t, shared.Unlock(ctx))
		requireFree(t, shared.Key())
		requireNoAcquired(t, m)
	})
}

// TestAnotherManagersHoldingIsRefused: under a holding of another Manager of the same
// database, the lock calls of this one would wait for it on the server: ErrNotReentrant,
// shared calls included. A Manager of another database locks its own lock of that name.
func TestAnotherManagersHoldingIsRefused(t *testing.T) {
	forEachHolding(t, func(t *testing.T, m *advisory.Manager) {
		ctx, name := ctxT(t), t.Name()
		other := newManager(t, nil, advisory.WithHolding(m.Holding()))
		elsewhere := newManager(t, []string{"dbname=" + otherDatabase(t)})
		err := m.Do(ctx, name, func(ctx context.Context) error {
			calls := refusedCalls(other, name)
			calls["LockShared"] = func(ctx context.Context) error { _, err := other.LockShared(ctx, name); return err }
			requireRefused(t, ctx, "under another Manager's holding", calls)
			l, err := atOnce(t, ctx, "Lock in another database", func(ctx context.Context) (*advisory.Lock, error) {
				return elsewhere.Lock(ctx, name)
			})
			require.NoError(t, err)
			require.False(t, l.Reentered())
			return l.Unlock(ctx)
		})
		require.NoError(t, err)
		requireFree(t, advisory.KeyOf(name))
		requireNoAcquired(t, other)
	})
}

// otherDatabase returns the name of a second database on the test server, made for t
// and dropped when it ends (after the Managers made after this call are closed).
func otherDatabase(t *testing.T) string {
	t.Helper()
	db := "advisory_other_" + strings.TrimPrefix(advisory.KeyOf(t.Name()).String(), "-")
	_, err := admin.Exec(ctxT(t), "CREATE DATABASE "+db)
	require.NoError(t, err)
	t.Cleanup(func() {
		_, err := admin.Exec(context.Background(), "DROP DATABASE IF EXISTS "+db)
		require.NoError(t, err)
	})
	return db
}

// TestPairReentryIsByForm: a pair's re-entry is by pair; the bigint key with the same
// bits is another lock, taken on a connection of its own.
func TestPairReentryIsByForm(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	p := advisory.Pair{Class: 7, Object: int32(advisory.KeyOf(t.Name()))}
	outer, err := m.LockPair(ctx, p)
	require.NoError(t, err)
	under := advisory.ContextWithLock(ctx, outer)
	for what, call := range map[string]func(context.Context) (*advisory.Lock, error){
		"LockPair":    func(ctx context.Context) (*advisory.Lock, error) { return m.LockPair(ctx, p) },
		"TryLockPair": func(ctx context.Context) (*advisory.Lock, error) { return m.TryLockPair(ctx, p) },
	} {
		l, err := atOnce(t, under, what, call)
		require.NoError(t, err, what)
		require.True(t, l.Reentered(), what)
		require.NoError(t, l.Unlock(ctx))
	}
	bigint := advisory.Key(int64(p.Class)<<32 | int64(uint32(p.Object)))
	l, err := atOnce(t, under, "LockKey", func(ctx context.Context) (*advisory.Lock, error) { return m.LockKey(ctx, bigint) })
	require.NoError(t, err)
	require.False(t, l.Reentered(), "a different lock")
	require.NotEqual(t, outer.PID(), l.PID())
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, outer.Unlock(ctx))
	requireNoAcquired(t, m)
}
