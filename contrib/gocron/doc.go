// Package advgocron makes gocron v2 schedulers (github.com/go-co-op/gocron/v2) that
// run the same jobs in several replicas run each occurrence once, with PostgreSQL
// advisory locks from github.com/pgadvisory/advisory. It is its own module, so that
// gocron never enters the library's dependencies. Import it under its package name:
//
//	import advgocron "github.com/pgadvisory/advisory/contrib/gocron"
//
// Two ways, as gocron offers them:
//
//   - [Locker] (gocron.WithDistributedLocker, or WithDistributedJobLocker for one job):
//     every replica's timer fires; the first to take the job's lock runs the occurrence,
//     the others fail to take it and skip at once. The lock is kept for at least a given
//     time after it was taken, so that a replica whose timer fires a little late still
//     skips. At shutdown, [Locker.Close] (after the scheduler's, before the Manager's)
//     keeps the holds not yet over.
//   - [Elector] (gocron.WithDistributedElector): one replica is leader, holding one lock
//     for as long as its session lives, and only the leader runs jobs; when it dies or
//     loses its session, another replica takes the lock within milliseconds and leads.
//     [Elector.Close] hands over only once a given hold has passed since the last run.
//
// Neither is exactly-once in the strict sense: the lease is the database session, and
// there is no table recording which occurrences ran. A replica that crashes right after
// running an occurrence frees its lock at once, and a replica whose timer fires after
// that runs the same occurrence again. gocron does not give the job a context that ends
// when the lock is lost either: a job that must stop on loss should run its work under
// [advisory.Manager.TryDo] or [advisory.Manager.Do] itself. See docs/jobs.md in the
// advisory repository.
package advgocron
