package advisory_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/checkctx"
)

// TestCancelledLockStopsTheServerWait: a cancelled Lock returns ctx's error promptly, the
// server stops waiting (no granted=false row), nothing is held, nothing leaks, and the
// connection is still good (it went back to the pool).
func TestCancelledLockStopsTheServerWait(t *testing.T) {
	t.Parallel()
	holderM, m := newManager(t, nil), newManager(t, nil)
	ctx := ctxT(t)
	holder, err := holderM.Lock(ctx, t.Name())
	require.NoError(t, err)
	key := holder.Key()

	for _, how := range []string{"cancel", "deadline"} {
		wctx, cancel := context.WithCancel(ctx)
		if how == "deadline" {
			wctx, cancel = context.WithTimeout(ctx, 200*time.Millisecond)
		}
		done := make(chan error, 1)
		go func() {
			_, err := m.Lock(wctx, t.Name())
			done <- err
		}()
		waitForWaiters(t, key, 1)
		var start time.Time
		if how == "cancel" {
			start = time.Now()
			cancel()
		} else {
			<-wctx.Done()
			start = time.Now()
		}
		err := <-done
		took := time.Since(start)
		cancel()
		t.Logf("%s: Lock returned %v after ctx ended", how, took)
		require.ErrorIs(t, err, wctx.Err())
		assert.Less(t, took, 2*time.Second, "prompt return (generous for CI)")
		requireHeldBy(t, key, holder.PID()) // only the holder: no waiter left behind
		assert.EqualValues(t, 1, m.Stat().IdleConns(), "the cancelled wait's connection was kept, not leaked or closed")
		requireNoAcquired(t, m)
	}
	require.NoError(t, holder.Unlock(ctx))
}

// TestCancelRacingTheGrantNeverLeavesTheLockHeld places cancels at random points around
// the holder's unlock, so some land before the grant, some after, some on top of it. After
// every Lock call: if it failed, nobody holds the key; if it succeeded, its backend does.
func TestCancelRacingTheGrantNeverLeavesTheLockHeld(t *testing.T) {
	t.Parallel()
	// -short: 100 trials (each takes a trip through the server's cancel path; the 300 took
	// 25 s of the inner loop's long pole), as many as the pooled variants run.
	cancelRacingTheGrant(t, newManager(t, nil), newManager(t, nil), inShort(300, 100))
}

// cancelRacingTheGrant is TestCancelRacingTheGrantNeverLeavesTheLockHeld's body, for m
// waiting while holderM holds, over the given number of trials.
func cancelRacingTheGrant(t *testing.T, holderM, m *advisory.Manager, trials int) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	var won, cancelled int
	for i := 0; i < trials; i++ {
		// Each trial has a bound of its own: the 300 trials took 60 s beside two CPU
		// burners, and one deadline for them all ended the test mid-trial.
		ctx, end := context.WithTimeout(context.Background(), 30*time.Second)
		holder, err := holderM.Lock(ctx, t.Name())
		require.NoError(t, err)
		wctx, cancel := context.WithCancel(ctx)
		type result struct {
			l   *advisory.Lock
			err error
		}
		done := make(chan result, 1)
		go func() {
			l, err := m.Lock(wctx, t.Name())
			done <- result{l, err}
		}()
		waitingOrFail(t, holder.Key(), m, func() (bool, error) {
			if len(done) == 0 {
				return false, nil
			}
			r := <-done
			return true, r.err
		})
		// Unlock and cancel concurrently, each after a random delay of up to 1.5 ms.
		var wg sync.WaitGroup
		unlockAfter, cancelAfter := randDelay(rng), randDelay(rng)
		wg.Add(2)
		go func() { defer wg.Done(); spin(unlockAfter); assert.NoError(t, holder.Unlock(ctx)) }()
		go func() { defer wg.Done(); spin(cancelAfter); cancel() }()
		r := <-done
		wg.Wait()
		switch {
		case r.err == nil:
			won++
			requireHeldBy(t, holder.Key(), r.l.PID())
			require.NoError(t, r.l.Unlock(ctx))
		case errors.Is(r.err, context.Canceled):
			cancelled++
			requireFree(t, holder.Key()) // checked at return: no grant left behind
		default:
			t.Fatalf("trial %d: unexpected error %v", i, r.err)
		}
		requireNoAcquired(t, m)
		end()
	}
	t.Logf("%d trials: %d acquired, %d cancelled, 0 violations", trials, won, cancelled)
}

// waitingOrFail blocks until a backend waits for key (granted = false), as waitForWaiters
// does, but fails at once if the Lock that should wait has returned (returned reports
// whether it has, and its error), and, if none waits within 10 s, adds m's pool to
// waitForWaiters' report.
func waitingOrFail(t *testing.T, key advisory.Key, m *advisory.Manager, returned func() (bool, error)) {
	t.Helper()
	if within(10*time.Second, time.Millisecond, func() bool {
		if ok, err := returned(); ok {
			t.Fatalf("the Lock that should wait for key %d returned first: %v", key, err)
		}
		return waiters(t, key) == 1
	}) {
		return
	}
	st := m.Stat()
	t.Fatalf("no backend waits for key %d within 10s: the waiter's pool: %d acquired, %d idle, %d constructing, "+
		"%d in all; %s", key, st.AcquiredConns(), st.IdleConns(), st.ConstructingConns(), st.TotalConns(), lockScene(t, key))
}

func randDelay(rng *rand.Rand) time.Duration {
	return time.Duration(rng.IntN(1500)) * time.Microsecond
}

// spin waits d without a timer, so sub-millisecond delays are honoured.
func spin(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
	}
}

// TestLockWithDoneContext: a ctx already done fails at once and takes nothing.
func TestLockWithDoneContext(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := m.Lock(ctx, t.Name())
	require.ErrorIs(t, err, context.Canceled)
	_, err = m.TryLock(ctx, t.Name())
	require.ErrorIs(t, err, context.Canceled)
	requireFree(t, advisory.KeyOf(t.Name()))
	requireNoAcquired(t, m)
}

// TestCancelledTryLockLeavesNothingHeld ends TryLock's ctx at each place in turn where
// the call waits on it (checkctx.CancelAtDone: the n-th Done call, n = 1, 2, ... until a
// call looks fewer than n times): taking a connection from the pool, before the
// statement is sent, and while it is on its round trip, where pgconn's watch sees the
// ctx end and a CancelRequest is sent. Whenever it returns the ctx error, pg_locks shows
// the lock free at once, and the connection went back to the pool or was closed. The
// round trip is reached on purpose, not by the luck of a timer: the test counts the
// CancelRequests, each a dial of its own.
func TestCancelledTryLockLeavesNothingHeld(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m, dials := newDialCountingManager(t)
	key := advisory.KeyOf(t.Name())
	won, cancelled := 0, 0
	dials0, conns0 := dials.Load(), m.Stat().NewConnsCount()
	for n := 1; ; n++ {
		cctx := checkctx.CancelAtDone(ctx, n)
		l, err := m.TryLock(cctx, t.Name())
		if err != nil {
			require.ErrorIs(t, err, context.Canceled, "ctx ended at its look #%d", n)
			requireFree(t, key) // at return, not eventually
			cancelled++
		} else {
			won++
			requireHeldBy(t, key, l.PID())
			require.NoError(t, l.Unlock(ctx))
		}
		requireNoAcquired(t, m)
		if cctx.Checks() < n { // the call looked fewer than n times: every look was visited
			break
		}
		require.Less(t, n, 100, "TryLock still looks at its ctx %d times", n)
	}
	cancels := dials.Load() - dials0 - m.Stat().NewConnsCount() + conns0
	t.Logf("%d won, %d cancelled, %d CancelRequests sent", won, cancelled, cancels)
	assert.Positive(t, cancelled)
	assert.Positive(t, cancels, "a ctx ended during the statement's round trip (a CancelRequest was sent)")
}

// newDialCountingManager returns a Manager on the test server whose dials (its
// connections' and its CancelRequests') are counted.
func newDialCountingManager(t *testing.T) (*advisory.Manager, *atomic.Int64) {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn(t))
	require.NoError(t, err)
	dials := new(atomic.Int64)
	var d net.Dialer
	cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		dials.Add(1)
		return d.DialContext(ctx, network, addr)
	}
	m, err := advisory.NewWithConfig(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m, dials
}
