// Package advrobfigcron makes robfig/cron v3 schedulers (github.com/robfig/cron/v3) that run
// the same jobs in several replicas run each tick on one replica only, with PostgreSQL
// advisory locks from github.com/pgadvisory/advisory. It is its own module, so that cron
// never enters the library's dependencies.
//
// [OnOneReplica] is a cron.JobWrapper built on [advisory.Manager.TryDo]: at each tick
// every replica's timer fires, the first to take the lock runs the job, the others skip
// at once. The lock is kept for at least a given time after it was taken, so that a
// replica whose timer fires a little late still skips.
//
// A cron.Job has no context and returns no error. A job that should stop when the lock is
// lost, or report an error, is a [FuncJob]: the wrapper gives it a context that is
// cancelled on loss, and logs the error it returns. Everything is reported to a
// cron.Logger, as cron's own wrappers do.
//
// This is not exactly-once in the strict sense: the lease is the database session, and
// there is no table recording which ticks ran. A replica that crashes right after running
// a tick frees its lock at once, and a replica whose timer fires after that runs the same
// tick again. See docs/jobs.md in the advisory repository.
package advrobfigcron
