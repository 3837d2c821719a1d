package advisory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// The bound of a run of in-process handoffs (WithLocalHandoff): what a waiter of another
// process waits for, counted, and the option's validation.

// hammer runs goroutines of m that take name in turn, each holding it for hold, until
// stop is closed. It counts the holdings begun, and fails t if two overlap.
func hammer(t *testing.T, m *advisory.Manager, name string, goroutines int, hold time.Duration,
	stop <-chan struct{}) (holdings *atomic.Int64, wait func()) {
	holdings = new(atomic.Int64)
	var inside atomic.Int32
	var wg sync.WaitGroup
	ctx := ctxT(t)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := m.Lock(ctx, name)
				if !assert.NoError(t, err) {
					return
				}
				holdings.Add(1)
				assert.EqualValues(t, 1, inside.Add(1), "two holders at once")
				time.Sleep(hold)
				inside.Add(-1)
				if !assert.NoError(t, l.Unlock(ctx)) {
					return
				}
			}
		}()
	}
	return holdings, wg.Wait
}

// waitingApp reports whether a backend with application_name app waits for key.
func waitingApp(t testing.TB, key advisory.Key, app string) bool {
	var n int
	require.NoError(t, admin.QueryRow(context.Background(), `SELECT count(*) FROM pg_locks l
		JOIN pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND NOT l.granted AND l.objsubid = 1
		  AND l.classid = $1 AND l.objid = $2 AND a.application_name = $3`,
		uint32(uint64(key)>>32), uint32(key), app).Scan(&n))
	return n > 0
}

// remoteWaits has a Manager of its own (another server session, as another process's)
// take name while m's goroutines hammer it, rounds times. Each round it counts the
// holdings m began between the remote call showing as a waiter in pg_locks and its grant,
// checks that m's next call then queues on the server behind it, and returns the most.
func remoteWaits(t *testing.T, name string, rounds int, opts ...advisory.Option) (most int64, longest time.Duration) {
	m := newManager(t, nil, opts...)
	app := "remote-" + t.Name()
	remote := newManager(t, []string{"application_name=" + app})
	ctx := ctxT(t)
	key := advisory.KeyOf(name)
	stop := make(chan struct{})
	holdings, wait := hammer(t, m, name, 6, time.Millisecond, stop)
	defer func() { close(stop); wait() }()
	for r := 0; r < rounds; r++ {
		begun := holdings.Load()
		eventually(t, 10*time.Second, func() bool { return holdings.Load() > begun+10 }, "m hammering")
		got := lockAsync(ctx, remote, name)
		start := time.Now()
		var l *advisory.Lock
		eventually(t, 10*time.Second, func() bool {
			select {
			case l = <-got: // granted at once, between two runs of m: no wait to measure
				return true
			default:
				return waitingApp(t, key, app)
			}
		}, "the remote call waiting")
		if l != nil {
			require.NoError(t, l.Unlock(ctx))
			r--
			continue
		}
		seen := holdings.Load()
		l = <-got
		took := time.Since(start)
		require.NotNil(t, l, "the remote call got the lock")
		most, longest = max(most, holdings.Load()-seen), max(longest, took)
		requireHeldBy(t, key, l.PID())
		// m's next call waits on the server now, behind the remote holder: one waiter,
		// the others in m's queue. And m begins no holding while the remote one holds.
		waitForWaiters(t, key, 1)
		during := holdings.Load()
		time.Sleep(20 * time.Millisecond)
		require.Equal(t, during, holdings.Load(), "m took the lock while the remote call held it")
		require.NoError(t, l.Unlock(ctx))
	}
	return most, longest
}

func TestHandoffRemoteWaiterGetsItsTurnAfterMaxHandoffs(t *testing.T) {
	t.Parallel()
	const max = 4
	most, longest := remoteWaits(t, t.Name(), 5, advisory.WithLocalHandoff(max, time.Minute))
	t.Logf("m began at most %d holdings while the remote call waited (bound %d); longest remote wait %v",
		most, max+1, longest)
	// At most the rest of the run in progress (max handoffs), or the whole run (max+1) of
	// m's call that waited on the server ahead of the remote one.
	assert.LessOrEqual(t, most, int64(max+1))
}

func TestHandoffRemoteWaiterGetsItsTurnAfterTheBudget(t *testing.T) {
	t.Parallel()
	// Each holding lasts at least 1 ms, so with a 5 ms budget a run hands off at most 4
	// times (the 5th would begin 5 ms or more into the run), however large max is.
	most, longest := remoteWaits(t, t.Name(), 5, advisory.WithLocalHandoff(1000, 5*time.Millisecond))
	t.Logf("m began at most %d holdings while the remote call waited (bound 5); longest remote wait %v", most, longest)
	assert.LessOrEqual(t, most, int64(5))
}

// TestLocalHandoffOption: WithLocalHandoff refuses a bound outside 1 to 1000 handoffs
// and 1µs to 1m.
func TestLocalHandoffOption(t *testing.T) {
	t.Parallel()
	type bound struct {
		max    int
		budget time.Duration
	}
	for _, bad := range []bound{{0, time.Millisecond}, {-1, time.Millisecond}, {1001, time.Millisecond},
		{16, 0}, {16, -time.Second}, {16, time.Nanosecond}, {16, time.Minute + 1}} {
		_, err := advisory.New(context.Background(), "host=127.0.0.1 port=1", advisory.WithLocalHandoff(bad.max, bad.budget))
		require.ErrorIs(t, err, advisory.ErrInvalidOption, "%v", bad)
	}
	for _, good := range []bound{{1, time.Microsecond}, {16, 2 * time.Millisecond}, {1000, time.Minute}} {
		_, err := advisory.New(context.Background(), "host=127.0.0.1 port=1 connect_timeout=1",
			advisory.WithLocalHandoff(good.max, good.budget))
		require.NotErrorIs(t, err, advisory.ErrInvalidOption, "%v", good)
	}
}
