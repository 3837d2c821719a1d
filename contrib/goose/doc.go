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
// # Through a transaction pooler
//
// Behind a transaction pooler (PgBouncer pool_mode=transaction, Supabase's port 6543,
// Neon's -pooler endpoints, RDS Proxy) the Manager holds the lock as one open
// transaction (see advisory.WithHolding). Open goose's *sql.DB with [OpenDB] (it is
// sql.Open("pgx", dsn) in pgx's exec mode there): pgx's default statement cache fails
// through such a pooler ("prepared statement ... already exists" or "does not exist"
// from goose's version-table statements). Then the Locker works there as above, replicas
// started at once migrate once, and a migration marked NO TRANSACTION, such as CREATE
// INDEX CONCURRENTLY, runs: the holding keeps no snapshot once drained, so the index
// build does not wait for it. One thing differs: [Locker.SessionLock] does not tag
// goose's connection there. Through such a pooler that connection is no server session
// of its own: a session setting made on it would stay on a server session that other
// clients get next (and a later drain would end their work as this holding's), and
// goose's next transaction may run on another one. Nothing is lost for goose's SQL
// migrations that run in a transaction: only goose could send its COMMIT, so a killed
// holder's half-done migration can never commit; its backend keeps the migration's
// table locks until it next reads from or writes to its socket (the end of a long
// statement), and the next holder's migration waits for them. A migration marked NO
// TRANSACTION, and Go migrations' own connections, get no such protection there: the
// drain does not see them, and a statement of a killed holder's NO TRANSACTION migration
// runs on to its end, unless their connections carry the holding's tag from the start
// (advisory.Lock.WorkConnString, through [Locker.Held]).
//
// # Loss stops the migration
//
// goose runs the migrations under the ctx given to Provider.Up, which a Locker cannot
// cancel. Derive it with [Locker.Context]: a loss then cancels the migration in flight
// (a transactional one rolls back), and Up returns an error that also carries the loss
// (wrapping [advisory.ErrLockLost]), which the Unlock reports as well.
package advgoose
