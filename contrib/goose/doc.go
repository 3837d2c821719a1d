// Package advgoose makes goose v3 (github.com/pressly/goose/v3) migrate one database from
// many replicas one at a time, with a PostgreSQL advisory lock from
// github.com/pgadvisory/advisory. It is its own module, so that goose never enters the
// library's dependencies. Import it under its package name:
//
//	import advgoose "github.com/pgadvisory/advisory/contrib/goose"
//
// A [Locker] is both a goose lock.SessionLocker and a lock.Locker; install it with one
// of:
//
//	goose.WithSessionLocker(advgoose.New(m, "myapp/migrations")) // recommended
//	goose.WithLocker(advgoose.New(m, "myapp/migrations"))
//
// Either way the lock is taken through the Manager, on a connection of its own: the wait
// is on the server (no polling, no 5-minute give-up as goose's session locker has), a
// cancelled ctx cancels it on the server, and a loss is seen at once. Before the
// migrations start, the Locker drains earlier holders' tagged sessions
// ([advisory.Lock.Drain]): a replica that was killed mid-migration leaves a backend
// running its statement, and that backend is ended, its transaction rolled back, before
// the next replica migrates.
//
// # What each interface lets the adapter do
//
// With WithSessionLocker, goose hands over the connection it runs its SQL migrations and
// version-table statements on; [Locker.SessionLock] tags it for the holding (see
// docs/work.md in the advisory repository), so the drain finds it. With WithLocker, goose
// takes that connection before calling Lock and hands over only its *sql.DB: the adapter
// cannot tag it, and a killed holder's leftover statement is not drained (it is, under
// WithSessionLocker). Go migrations run on goose's *sql.DB under either: tag their own
// connections with [Locker.Held] and [advisory.Lock.WorkConnString] if they must be
// drained too.
//
// # Loss stops the migration
//
// goose runs the migrations under the ctx given to Provider.Up, which a Locker cannot
// cancel. Derive it with [Locker.Context]: a loss then cancels the migration in flight
// (a transactional one rolls back), and Up returns an error that also carries the loss
// (wrapping [advisory.ErrLockLost]), which the Unlock reports as well.
package advgoose
