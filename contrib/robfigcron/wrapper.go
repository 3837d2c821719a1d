package advrobfigcron

import (
	"context"
	"fmt"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/pgadvisory/advisory"
)

// FuncJob is a cron.Job that takes a context and returns an error. Wrapped by
// [OnOneReplica], it runs with a context that is cancelled if the lock is lost
// (context.Cause then wraps [advisory.ErrLockLost]) or when the wrapper's base context
// ends (see [WithContext]), and its error is logged. Add it with cron's AddJob:
//
//	c.AddJob("@hourly", advrobfigcron.FuncJob(writeReport))
//
// Run outside the wrapper (cron.Job's Run, or a wrapper between OnOneReplica and the job
// that hides its type, like cron.Recover placed after it), it runs with
// context.Background() and its error is dropped: put OnOneReplica last in the chain.
type FuncJob func(ctx context.Context) error

// Run runs f with context.Background(), dropping its error; see [FuncJob].
func (f FuncJob) Run() { _ = f(context.Background()) }

var _ cron.Job = FuncJob(nil)

// OnOneReplica returns a cron.JobWrapper that runs the job at a tick only if no other
// session holds the advisory lock name (see [advisory.Manager.TryDo]); it never waits
// for the lock. Every job it wraps shares that lock: in cron.WithChain it covers all of a
// Cron's jobs, and runs of different jobs then exclude each other; to give each job its
// own lock, wrap each with cron.NewChain(OnOneReplica(m, name, atLeast)).Then(job).
//
// After the job returns, the lock is kept until atLeast has passed since it was taken, so
// that a replica whose timer fires late (by less than atLeast) skips the tick. Pick
// atLeast larger than the timer skew between replicas and smaller than the schedule's
// interval minus that skew; zero means no hold. A negative atLeast makes every run fail
// (logged as an error wrapping [advisory.ErrInvalidOption]).
//
// Reporting, to the cron.Logger of [WithLogger]: a tick skipped because the lock is held
// elsewhere is logged at Info; a failed try (server unreachable, pool exhausted, Manager
// closed), the error of a [FuncJob], and a lock lost while the job ran or during the hold
// are logged at Error. A plain cron.Job cannot be stopped on loss: it runs to its end.
//
// The wrapper does not recover panics: TryDo releases the lock at once, without the hold,
// and the panic goes on. Put cron.Recover before it in the chain to keep the process up:
// cron.WithChain(cron.Recover(logger), OnOneReplica(m, name, atLeast)). m must stay open
// while the Cron runs. OnOneReplica panics if m is nil.
func OnOneReplica(m *advisory.Manager, name string, atLeast time.Duration, opts ...Option) cron.JobWrapper {
	if m == nil {
		panic("advrobfigcron: OnOneReplica with a nil Manager")
	}
	o := newOptions(opts)
	return func(j cron.Job) cron.Job {
		fn := jobFunc(j)
		return cron.FuncJob(func() { run(m, name, atLeast, o, fn) })
	}
}

// jobFunc returns j as TryDo's fn: a FuncJob as it is, any other Job ignoring ctx.
func jobFunc(j cron.Job) func(context.Context) error {
	if f, ok := j.(FuncJob); ok {
		return f
	}
	return func(context.Context) error { j.Run(); return nil }
}

// run is one tick of a wrapped job on this replica.
func run(m *advisory.Manager, name string, atLeast time.Duration, o options, fn func(context.Context) error) {
	ran, err := m.TryDo(o.ctx, name, atLeast, fn)
	switch {
	case !ran && err == nil:
		o.logger.Info("skip: lock held by another replica", "lock", name)
	case !ran:
		o.logger.Error(fmt.Errorf("advrobfigcron: try %q: %w", name, err), "not run", "lock", name)
	case err != nil:
		o.logger.Error(err, "job failed", "lock", name)
	}
}
