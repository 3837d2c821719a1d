package advrobfigcron_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	advrobfigcron "github.com/pgadvisory/advisory/contrib/robfigcron"
)

// tally counts runs per tick; a tick is the run's start truncated to the 2 s schedule,
// so a run late by up to 2 s still counts for its own tick.
type tally struct {
	mu   sync.Mutex
	runs map[time.Time][]int
}

func (ty *tally) job(replica int) advrobfigcron.FuncJob {
	return func(ctx context.Context) error {
		tick := time.Now().Truncate(2 * time.Second)
		ty.mu.Lock()
		defer ty.mu.Unlock()
		ty.runs[tick] = append(ty.runs[tick], replica)
		return nil
	}
}

// startReplica starts one replica: its own Manager and its own cron.Cron, firing every 2 s
// on the wall clock, with delay (zero, or a skew) before the wrapper tries the lock.
func startReplica(t *testing.T, name string, delay time.Duration, log *recLogger, job cron.Job) {
	t.Helper()
	m := newManager(t)
	skew := func(j cron.Job) cron.Job {
		return cron.FuncJob(func() { time.Sleep(delay); j.Run() })
	}
	c := cron.New(cron.WithSeconds(), cron.WithLogger(log),
		cron.WithChain(cron.Recover(log), skew, advrobfigcron.OnOneReplica(m, name, time.Second, advrobfigcron.WithLogger(log))))
	_, err := c.AddJob("*/2 * * * * *", job)
	require.NoError(t, err)
	c.Start()
	t.Cleanup(func() { <-c.Stop().Done() })
}

// TestReplicas runs three replicas, each with a real robfig/cron scheduler, for about four
// ticks: no tick may run more than once, at least one must run, and the replicas that
// lost a tick's race must have skipped it. The third replica fires 300 ms late at every
// tick; the hold (atLeast 1 s) is what makes it skip a tick another replica ran.
func TestReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three schedulers for about 8 s")
	}
	t.Parallel()
	name := lockName(t)
	ty := &tally{runs: map[time.Time][]int{}}
	logs := []*recLogger{{}, {}, {}}
	for i, delay := range []time.Duration{0, 0, 300 * time.Millisecond} {
		startReplica(t, name, delay, logs[i], ty.job(i))
	}
	time.Sleep(8 * time.Second)

	ty.mu.Lock()
	defer ty.mu.Unlock()
	require.NotEmpty(t, ty.runs, "no tick ran")
	for tick, rs := range ty.runs {
		assert.Len(t, rs, 1, "tick %v ran on replicas %v", tick.Format(time.TimeOnly), rs)
	}
	skips := 0
	for i, l := range logs {
		skips += l.skips()
		assert.Empty(t, l.errs(), "replica %d logged errors", i)
	}
	assert.NotZero(t, skips, "no replica skipped a tick")
	t.Logf("runs per tick: %v; skips: %d; late replica skipped %d", ty.runs, skips, logs[2].skips())
}
