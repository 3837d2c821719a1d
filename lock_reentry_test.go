package advisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// Reentrancy (issue 37, item 9): a call whose ctx carries a holding of the same lock
// from the same Manager re-enters it at once instead of waiting for itself forever.
// Every nested call here runs with a bounded ctx, so that code without re-entry fails
// the test (its wait ends with the bound) instead of hanging it.

// forEachHolding runs f in a parallel subtest per kind of holding, each with a Manager
// of its own that holds that way.
func forEachHolding(t *testing.T, f func(t *testing.T, m *advisory.Manager)) {
	for _, h := range []advisory.Holding{advisory.HoldingSession, advisory.HoldingTransaction} {
		t.Run(h.String(), func(t *testing.T) {
			t.Parallel()
			m := newManager(t, nil, advisory.WithHolding(h))
			require.Equal(t, h, m.Holding())
			f(t, m)
		})
	}
}

// nestedBound bounds a nested call: re-entry returns at once, a wait for the caller
// itself would end only here.
const nestedBound = 3 * time.Second

// atOnce runs call with ctx bounded by nestedBound and requires it to return well
// before the bound.
func atOnce[T any](t *testing.T, ctx context.Context, what string, call func(ctx context.Context) (T, error)) (T, error) {
	t.Helper()
	nctx, cancel := context.WithTimeout(ctx, nestedBound)
	defer cancel()
	start := time.Now()
	v, err := call(nctx)
	require.Less(t, time.Since(start), time.Second, "%s returns at once (err %v)", what, err)
	return v, err
}

// requireReentered checks a re-entered Lock of outer's holding, Unlocks it, and checks
// that the holding is still held by outer's backend afterwards.
func requireReentered(t *testing.T, ctx context.Context, what string, outer, l *advisory.Lock) {
	t.Helper()
	require.True(t, l.Reentered(), what)
	require.False(t, outer.Reentered(), what)
	require.Equal(t, outer.PID(), l.PID(), "%s: the holding's backend", what)
	require.Equal(t, outer.Key(), l.Key(), what)
	require.False(t, l.Shared(), "%s: it reports the holding, which is exclusive", what)
	require.NoError(t, l.Err(), what)
	require.False(t, isDone(l.Done()), what)
	require.NoError(t, l.Unlock(ctx), "%s: Unlock", what)
	require.True(t, isDone(l.Done()), what)
	require.ErrorIs(t, l.Err(), advisory.ErrNotHeld, what)
	require.ErrorIs(t, l.Unlock(ctx), advisory.ErrNotHeld, "%s: a second Unlock", what)
	require.NoError(t, outer.Err(), "%s: the outer holding goes on", what)
	requireHeldBy(t, outer.Key(), outer.PID())
}

func isDone(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestNestedLockCallsReenter: every Lock and TryLock form, exclusive or shared, by name
// or by key, made with the ctx of Do's fn, re-enters Do's holding at once: its own
// handle on the same backend, whose Unlock releases nothing; no connection is pinned for
// it.
func TestNestedLockCallsReenter(t *testing.T) {
	forEachHolding(t, func(t *testing.T, m *advisory.Manager) {
		ctx, name := ctxT(t), t.Name()
		key := advisory.KeyOf(name)
		calls := []struct {
			what string
			call func(ctx context.Context) (*advisory.Lock, error)
		}{
			{"Lock", func(ctx context.Context) (*advisory.Lock, error) { return m.Lock(ctx, name) }},
			{"TryLock", func(ctx context.Context) (*advisory.Lock, error) { return m.TryLock(ctx, name) }},
			{"LockKey", func(ctx context.Context) (*advisory.Lock, error) { return m.LockKey(ctx, key) }},
			{"TryLockKey", func(ctx context.Context) (*advisory.Lock, error) { return m.TryLockKey(ctx, key) }},
			{"LockShared", func(ctx context.Context) (*advisory.Lock, error) { return m.LockShared(ctx, name) }},
			{"TryLockShared", func(ctx context.Context) (*advisory.Lock, error) { return m.TryLockShared(ctx, name) }},
			{"LockKeyShared", func(ctx context.Context) (*advisory.Lock, error) { return m.LockKeyShared(ctx, key) }},
		}
		err := m.Do(ctx, name, func(ctx context.Context) error {
			outer := advisory.LockFromContext(ctx)
			acquired := m.Stat().AcquiredConns()
			for _, c := range calls {
				l, err := atOnce(t, ctx, c.what, c.call)
				require.NoError(t, err, c.what)
				require.Equal(t, acquired, m.Stat().AcquiredConns(), "%s pins no connection", c.what)
				requireReentered(t, ctx, c.what, outer, l)
			}
			// Nested twice: a Lock under a Lock re-entered under Do's holding.
			l1, err := m.Lock(ctx, name)
			require.NoError(t, err)
			l2, err := atOnce(t, advisory.ContextWithLock(ctx, l1), "Lock under a re-entered Lock",
				func(ctx context.Context) (*advisory.Lock, error) { return m.Lock(ctx, name) })
			require.NoError(t, err)
			require.NoError(t, l1.Unlock(ctx))
			requireReentered(t, ctx, "a Lock re-entered through another", outer, l2)
			return nil
		})
		require.NoError(t, err)
		requireFree(t, key)
		requireNoAcquired(t, m)
	})
}

// TestNestedDoAndTryDoReenter: Do and TryDo inside Do run fn at once under the same
// holding (fn's ctx carries a re-entered Lock; pg_locks shows the outer backend alone),
// and leave it held; TryDo's hold does not apply to a re-entered holding.
func TestNestedDoAndTryDoReenter(t *testing.T) {
	forEachHolding(t, func(t *testing.T, m *advisory.Manager) {
		ctx, name := ctxT(t), t.Name()
		key := advisory.KeyOf(name)
		err := m.Do(ctx, name, func(ctx context.Context) error {
			outer := advisory.LockFromContext(ctx)
			var inner *advisory.Lock
			_, err := atOnce(t, ctx, "Do", func(ctx context.Context) (struct{}, error) {
				return struct{}{}, m.Do(ctx, name, func(ctx context.Context) error {
					inner = advisory.LockFromContext(ctx)
					requireHeldBy(t, key, outer.PID())
					return nil
				})
			})
			require.NoError(t, err)
			require.True(t, inner.Reentered(), "the nested Do's fn runs under a re-entered Lock")
			require.ErrorIs(t, inner.Err(), advisory.ErrNotHeld, "the nested Do unlocked its Lock")
			requireHeldBy(t, key, outer.PID())

			ran, err := atOnce(t, ctx, "TryDo", func(ctx context.Context) (bool, error) {
				return m.TryDo(ctx, name, time.Hour, func(ctx context.Context) error {
					require.True(t, advisory.LockFromContext(ctx).Reentered())
					return nil
				})
			})
			require.NoError(t, err)
			require.True(t, ran, "a nested TryDo runs fn: it does not find the lock taken")
			requireHeldBy(t, key, outer.PID())
			return nil
		})
		require.NoError(t, err)
		requireFree(t, key)
		requireNoAcquired(t, m)
	})
}

// TestOuterReleaseEndsReenteredLocks: the holding's release (Unlock of the Lock, or the
// end of Do) ends every re-entered Lock still open, which then reports ErrNotHeld; a call
// with a ctx that carries a holding that has ended fails at once with its end.
func TestOuterReleaseEndsReenteredLocks(t *testing.T) {
	forEachHolding(t, func(t *testing.T, m *advisory.Manager) {
		ctx, name := ctxT(t), t.Name()
		outer, err := m.Lock(ctx, name)
		require.NoError(t, err)
		under := advisory.ContextWithLock(ctx, outer)
		inner, err := atOnce(t, under, "Lock", func(ctx context.Context) (*advisory.Lock, error) { return m.Lock(ctx, name) })
		require.NoError(t, err)
		require.NoError(t, outer.Unlock(ctx), "the outer Unlock releases the lock")
		requireFree(t, outer.Key())
		require.True(t, isDone(inner.Done()))
		require.ErrorIs(t, inner.Err(), advisory.ErrNotHeld)
		require.ErrorIs(t, inner.Unlock(ctx), advisory.ErrNotHeld)
		_, err = atOnce(t, under, "Lock under a released holding", func(ctx context.Context) (*advisory.Lock, error) {
			return m.Lock(ctx, name)
		})
		require.ErrorIs(t, err, advisory.ErrNotHeld)
		require.Len(t, libraryPrefix.FindAllString(err.Error(), -1), 1, "one prefix: %v", err)

		var leaked *advisory.Lock
		require.NoError(t, m.Do(ctx, name, func(ctx context.Context) error {
			leaked, err = m.Lock(ctx, name) // never unlocked
			return err
		}))
		require.ErrorIs(t, leaked.Err(), advisory.ErrNotHeld, "Do's release ended the Lock fn left open")
		requireFree(t, outer.Key())
		requireNoAcquired(t, m)
	})
}

// TestReenteredLocksAreToldOfTheLoss: when the holding is lost (its backend terminated),
// every re-entered Lock is told too (Done, Err wrapping ErrLockLost, Unlock returning the
// loss), a nested Do's fn has its ctx cancelled with the loss, and Do reports it.
func TestReenteredLocksAreToldOfTheLoss(t *testing.T) {
	forEachHolding(t, func(t *testing.T, m *advisory.Manager) {
		ctx, name := ctxT(t), t.Name()
		var inner *advisory.Lock
		err := m.Do(ctx, name, func(ctx context.Context) error {
			outer := advisory.LockFromContext(ctx)
			var err error
			inner, err = atOnce(t, ctx, "Lock", func(ctx context.Context) (*advisory.Lock, error) { return m.Lock(ctx, name) })
			require.NoError(t, err)
			return m.Do(ctx, name, func(ctx context.Context) error {
				terminate(t, outer.PID())
				select {
				case <-ctx.Done():
				case <-time.After(10 * time.Second):
					t.Error("the nested fn's ctx was not cancelled by the loss")
				}
				require.ErrorIs(t, context.Cause(ctx), advisory.ErrLockLost)
				return ctx.Err()
			})
		})
		require.ErrorIs(t, err, advisory.ErrLockLost)
		require.True(t, isDone(inner.Done()))
		require.ErrorIs(t, inner.Err(), advisory.ErrLockLost)
		require.ErrorIs(t, inner.Unlock(ctx), advisory.ErrLockLost)
		requireNoAcquired(t, m)
	})
}

// TestPanicInANestedFnReleasesOnce: a panic in a nested Do's fn goes through both Do
// calls; the lock is released once, by the outer one, and nothing is left held or pinned.
func TestPanicInANestedFnReleasesOnce(t *testing.T) {
	forEachHolding(t, func(t *testing.T, m *advisory.Manager) {
		ctx, name := ctxT(t), t.Name()
		boom := errors.New("boom")
		var recovered any
		var inner *advisory.Lock
		func() {
			defer func() { recovered = recover() }()
			m.Do(ctx, name, func(ctx context.Context) error {
				nctx, cancel := context.WithTimeout(ctx, nestedBound)
				defer cancel()
				return m.Do(nctx, name, func(ctx context.Context) error {
					inner = advisory.LockFromContext(ctx)
					panic(boom)
				})
			})
		}()
		require.Equal(t, boom, recovered)
		require.NotNil(t, inner, "the nested fn ran")
		require.ErrorIs(t, inner.Err(), advisory.ErrNotHeld)
		requireReleased(t, m, name, "after the nested panic")
		require.NoError(t, m.Do(ctx, name, func(context.Context) error { return nil }), "the lock can be taken again")
	})
}
