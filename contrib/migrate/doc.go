// Package advmigrate makes golang-migrate (github.com/golang-migrate/migrate/v4) take its
// lock through a PostgreSQL advisory lock of github.com/pgadvisory/advisory: of many
// replicas that start at once, one migrates and the others wait; the wait is bounded and
// cancelled on the server when it ends, and the holder hears of a loss.
// It is its own module, so that golang-migrate never enters the library's dependencies.
//
// [Wrap] wraps a PostgreSQL database.Driver (the pgx/v5 driver "pgx5", which the tests
// use; "postgres" and "pgx" run every statement on one session the same way):
// migrate calls the wrapper's Lock and Unlock around every Up, Down, Steps, Migrate,
// Force and Drop, and the wrapper takes the lock with an [advisory.Manager] instead of the
// driver's own pg_advisory_lock, which waits on context.Background() with no bound and
// never notices a loss. Every other call goes to the wrapped driver.
//
// Holding the lock, the wrapper makes the migration's session part of the holding's work
// (docs/work.md in the advisory repository): before migrate runs anything it drains the
// sessions an earlier holder left running (a replica SIGKILLed in the middle of a
// migration), and it tags the driver's own session so that the next holder drains it in
// turn. When the lock is lost, it refuses to start another migration; a migration already
// running runs on until it ends, or until the next holder's drain ends its session.
// [WithRecoverDirty] mends, under the lock, a version an interrupted migration left dirty.
//
// Behind a transaction pooler (PgBouncer pool_mode=transaction, Supabase's port 6543,
// Neon's -pooler endpoints, RDS Proxy) the Manager holds the lock as one open transaction
// (advisory.WithHolding), and the driver's connection is no server session of its own:
// the wrapper sets nothing on it (a session setting would stay on a server session that
// other clients get next). It gives each migration the holding's tag for that
// migration's own transaction instead, in a statement run first with it, so that a
// later holder's drain still finds a killed holder's migration on the server and rolls it
// back. That holds for a migration run as one statement list, the drivers' default, not
// with MultiStatementEnabled. The driver's connection string must not make pgx cache
// prepared statements there (default_query_exec_mode=exec, or simple_protocol).
//
// See the "golang-migrate as a library" section of docs/migrations.md in the advisory
// repository for the mixed case (wrapped and unwrapped replicas) and the recovery from a
// migration left dirty.
package advmigrate
