package advrobfigcron_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advrobfigcron "github.com/pgadvisory/advisory/contrib/robfigcron"
)

// TestLateReplicaSkips calls two replicas' wrapped jobs by hand, the second after the
// first's job returned: with a hold the second skips, without one it runs the tick again.
func TestLateReplicaSkips(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	a, b := newManager(t), newManager(t)
	for _, atLeast := range []time.Duration{time.Minute, 0} {
		ctx, cancel := context.WithCancel(context.Background())
		la, lb := &recLogger{}, &recLogger{}
		ranA, ranB := make(chan struct{}, 1), make(chan struct{}, 1)
		jobA := advrobfigcron.OnOneReplica(a, name, atLeast, advrobfigcron.WithLogger(la), advrobfigcron.WithContext(ctx))(
			cron.FuncJob(func() { ranA <- struct{}{} }))
		jobB := advrobfigcron.OnOneReplica(b, name, atLeast, advrobfigcron.WithLogger(lb))(
			cron.FuncJob(func() { ranB <- struct{}{} }))
		doneA := make(chan struct{})
		go func() { defer close(doneA); jobA.Run() }()
		<-ranA
		if atLeast > 0 { // A holds the lock for its hold: B, late, skips
			jobB.Run()
			assert.Empty(t, ranB, "late replica ran the tick despite the hold")
			assert.Equal(t, 1, lb.skips())
			cancel() // ends A's hold: the lock is released at once
			<-doneA
		} else { // no hold: once A is done, B runs the tick again
			<-doneA
			jobB.Run()
			assert.Len(t, ranB, 1, "without a hold the late replica runs")
		}
		cancel()
		assert.Empty(t, la.errs())
		assert.Empty(t, lb.errs())
		assert.Empty(t, holders(t, name))
	}
}

// TestLossCancelsFuncJob runs a FuncJob under a real cron.Cron and terminates the
// holder's session while it runs: the job's ctx ends with a cause wrapping ErrLockLost,
// and the loss is logged as an error.
func TestLossCancelsFuncJob(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	m := newManager(t)
	log := &recLogger{}
	ctx, shutdown := context.WithCancel(context.Background())
	c := cron.New(cron.WithSeconds(), cron.WithLogger(log), cron.WithChain(
		cron.Recover(log), advrobfigcron.OnOneReplica(m, name, 0, advrobfigcron.WithLogger(log), advrobfigcron.WithContext(ctx))))
	started, cause := make(chan struct{}, 1), make(chan error, 1)
	_, err := c.AddJob("* * * * * *", advrobfigcron.FuncJob(func(ctx context.Context) error {
		select { // later ticks skip while this one runs; one after the loss may run
		case started <- struct{}{}:
		default:
			return nil
		}
		<-ctx.Done()
		cause <- context.Cause(ctx)
		return ctx.Err()
	}))
	require.NoError(t, err)
	c.Start()
	t.Cleanup(func() { shutdown(); <-c.Stop().Done() })
	<-started
	var pids []uint32
	eventually(t, 10*time.Second, func() bool { pids = holders(t, name); return len(pids) == 1 }, "the job's lock is held")
	terminate(t, pids[0])
	select {
	case err := <-cause:
		require.ErrorIs(t, err, advisory.ErrLockLost)
	case <-time.After(30 * time.Second):
		t.Fatal("the job's ctx did not end within 30 s of the loss")
	}
	eventually(t, 10*time.Second, func() bool { return len(log.errs()) > 0 }, "the loss is logged")
	assert.ErrorIs(t, log.errs()[0], advisory.ErrLockLost)
}

// TestFuncJobError: a FuncJob's error is logged; so are a negative atLeast and a failed
// try (a closed Manager), as errors, without running the job.
func TestFuncJobError(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	m := newManager(t)
	log := &recLogger{}
	boom := errors.New("boom")
	advrobfigcron.OnOneReplica(m, name, 0, advrobfigcron.WithLogger(log))(advrobfigcron.FuncJob(func(context.Context) error { return boom })).Run()
	ran := false
	advrobfigcron.OnOneReplica(m, name, -time.Second, advrobfigcron.WithLogger(log))(cron.FuncJob(func() { ran = true })).Run()
	m.Close()
	advrobfigcron.OnOneReplica(m, name, 0, advrobfigcron.WithLogger(log))(cron.FuncJob(func() { ran = true })).Run()
	assert.False(t, ran, "a job ran with a negative atLeast or a closed Manager")
	errs := log.errs()
	require.Len(t, errs, 3)
	assert.ErrorIs(t, errs[0], boom)
	assert.ErrorIs(t, errs[1], advisory.ErrInvalidOption)
	assert.ErrorIs(t, errs[2], advisory.ErrClosed)
}

// TestPanicWithRecover: the wrapper does not recover; cron.Recover before it does, and the
// lock is released at once, without the hold.
func TestPanicWithRecover(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	m := newManager(t)
	log := &recLogger{}
	job := cron.NewChain(cron.Recover(log), advrobfigcron.OnOneReplica(m, name, time.Hour, advrobfigcron.WithLogger(log))).
		Then(cron.FuncJob(func() { panic("job panicked") }))
	start := time.Now()
	require.NotPanics(t, job.Run)
	assert.Less(t, time.Since(start), time.Minute, "the hold was kept after a panic")
	assert.Empty(t, holders(t, name))
	require.Len(t, log.errs(), 1) // cron.Recover's report
	assert.Panics(t, advrobfigcron.OnOneReplica(m, name, time.Hour, advrobfigcron.WithLogger(log))(cron.FuncJob(func() { panic("bare") })).Run)
}

func TestNilArguments(t *testing.T) {
	assert.Panics(t, func() { advrobfigcron.OnOneReplica(nil, "x", 0) })
	assert.Panics(t, func() { advrobfigcron.WithLogger(nil) })
	assert.Panics(t, func() { advrobfigcron.WithContext(nil) }) //nolint:staticcheck // the point of the test
}

// TestStopKeepsTheHold: a replica shutting down right after it ran a tick, in the order
// the docs give (cron.Stop, wait for its ctx, and only then cancel the WithContext ctx),
// keeps the lock for the rest of the hold: a late replica's try during the stop skips,
// and Stop's ctx is done only once the hold is over. Cancelling first ends the hold at
// once, and the late replica runs the tick again: the cost the docs name.
func TestStopKeepsTheHold(t *testing.T) {
	t.Parallel()
	name := lockName(t)
	const atLeast = 1500 * time.Millisecond
	b := newManager(t)
	for _, cancelFirst := range []bool{false, true} {
		a := newManager(t)
		ctx, shutdown := context.WithCancel(context.Background())
		t.Cleanup(shutdown)
		la, lb := &recLogger{}, &recLogger{}
		ran := make(chan struct{}, 1)
		c := cron.New(cron.WithSeconds(), cron.WithLogger(la), cron.WithChain(
			advrobfigcron.OnOneReplica(a, name, atLeast, advrobfigcron.WithLogger(la), advrobfigcron.WithContext(ctx))))
		_, err := c.AddJob("* * * * * *", cron.FuncJob(func() {
			select {
			case ran <- struct{}{}:
			default:
			}
		}))
		require.NoError(t, err)
		c.Start()
		<-ran
		took := time.Now()
		if cancelFirst {
			shutdown()
		}
		stopped := c.Stop()
		lateRan := make(chan struct{}, 1)
		late := advrobfigcron.OnOneReplica(b, name, 0, advrobfigcron.WithLogger(lb))(
			cron.FuncJob(func() { lateRan <- struct{}{} }))
		if cancelFirst {
			<-stopped.Done()
			late.Run()
			assert.Len(t, lateRan, 1, "cancelled first: the hold ended at once, and the late replica ran the tick")
		} else {
			late.Run() // during the stop, in the hold (a round trip, far shorter than atLeast)
			assert.Empty(t, lateRan, "a late replica ran the tick while the stopping replica's hold lasted")
			assert.Equal(t, 1, lb.skips())
			assert.NoError(t, stopped.Err(), "Stop's ctx was done %v after the job ran, the hold not over", time.Since(took))
			<-stopped.Done()
			assert.Empty(t, holders(t, name), "the hold outlived Stop")
			shutdown()
		}
		assert.Empty(t, la.errs())
		assert.Empty(t, lb.errs())
		eventually(t, 10*time.Second, func() bool { return len(holders(t, name)) == 0 }, "released")
	}
}
