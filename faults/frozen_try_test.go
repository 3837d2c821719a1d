package faults_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestFrozenServerTryAndUnlock: behind a proxy (HAProxy, session holdings) and a
// transaction pooler (PgBouncer, transaction holdings), where the heartbeat is on by
// default, a TryLock and an Unlock whose backend is frozen (SIGSTOP) mid-statement are
// watched as a wait's slice is: called with a ctx that never ends, each fails within
// HeartbeatTold, the cancel grace and slack (not with ctx's error), a Session's TryLock
// too; the Unlock with ErrLockLost (the release was not confirmed). Once the backend is
// continued, the key is free for the next holder. Before, each waited as long as its ctx
// (a deferred Unlock(context.Background()) forever).
func TestFrozenServerTryAndUnlock(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	t.Parallel()
	ctx := ctxT(t, 3*time.Minute)
	holder, err := advisory.New(ctx, srv.DSN())
	require.NoError(t, err)
	t.Cleanup(holder.Close)
	h := pgtest.HAProxyForTest(t, srv, pgtest.HAProxyOptions{})
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(1))
	for _, path := range []struct{ name, dsn string }{{"HAProxy", h.DSN()}, {"PgBouncer", b.DSN()}} {
		t.Run(path.name, func(t *testing.T) {
			// One connection to the server behind each Manager (PgBouncer's pool of one): the
			// warm-up's backend is the one the next statement runs on.
			m, err := advisory.New(ctx, pgtest.WithPairs(path.dsn, "pool_max_conns=1"))
			require.NoError(t, err)
			t.Cleanup(m.Close)
			bounds := m.Bounds()
			require.Positive(t, bounds.HeartbeatTold, "a heartbeat by default behind %s", path.name)
			limit := bounds.HeartbeatTold + time.Second + 5*time.Second // the cancel grace, and slack
			background := context.Background()                          // a caller with no deadline

			for _, op := range []string{"TryLock", "Session.TryLock", "Unlock"} {
				name := t.Name() + "/" + op
				warm, err := m.TryLock(ctx, name+"/warm")
				require.NoError(t, err)
				pid := warm.PID()
				var call func() error
				switch op {
				case "TryLock":
					require.NoError(t, warm.Unlock(ctx))
					call = func() error {
						l, err := m.TryLock(background, name)
						if l != nil {
							l.Unlock(ctx) //nolint:errcheck // it must fail; this only cleans up
						}
						return err
					}
				case "Session.TryLock":
					require.NoError(t, warm.Unlock(ctx))
					S, err := m.Session(ctx)
					require.NoError(t, err)
					call = func() error {
						err := S.TryLock(background, name)
						S.Close(ctx) //nolint:errcheck // the Session ends with the failure
						return err
					}
				case "Unlock":
					call = func() error { return warm.Unlock(background) }
				}
				freeze(t, pid)
				thaw := func() { syscall.Kill(int(pid), syscall.SIGCONT) } //nolint:errcheck // also at the end (freeze)
				frozen := time.Now()
				done := make(chan error, 1)
				go func() { done <- call() }()
				select {
				case err = <-done:
				case <-time.After(limit + 30*time.Second):
					thaw()
					t.Fatalf("%s on a frozen backend still running %v after the freeze", op, time.Since(frozen))
				}
				took := time.Since(frozen)
				t.Logf("%s: failed %v after the freeze (HeartbeatTold %v): %v", op, took.Round(time.Millisecond), bounds.HeartbeatTold, err)
				require.Error(t, err, op)
				require.NotErrorIs(t, err, context.Canceled)
				require.Less(t, took, limit, "%s: within HeartbeatTold, the cancel grace and slack", op)
				require.Contains(t, err.Error(), "stopped answering", op)
				require.Equal(t, 1, strings.Count(err.Error(), "advisory:"), "one prefix: %v", err)
				if op == "Unlock" {
					require.ErrorIs(t, err, advisory.ErrLockLost, "an unconfirmed release")
				}
				thaw()
				for _, n := range []string{name, name + "/warm"} {
					next, err := holder.Lock(ctx, n)
					require.NoError(t, err, "%s: the key %q is free once the backend is continued", op, n)
					require.NoError(t, next.Unlock(ctx))
				}
			}
		})
	}
}
