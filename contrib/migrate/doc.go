// Package advmigrate makes golang-migrate (github.com/golang-migrate/migrate/v4) take its
// lock through a PostgreSQL advisory lock of github.com/pgadvisory/advisory: of many
// replicas that start at once, one migrates and the others wait; the wait is bounded and
// cancelled on the server when it ends, and the holder hears of a loss.
// It is its own module, so that golang-migrate never enters the library's dependencies.
//
// [Open] opens golang-migrate's pgx/v5 driver ("pgx5") and wraps it; [Wrap] wraps a
// PostgreSQL database.Driver already open (the pgx/v5 driver, which the tests use;
// "postgres" and "pgx" run every statement on one session the same way):
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
// (advisory.WithHolding), and the driver's connection is no server session of its own.
// Build the driver with [Open] there: golang-migrate's own constructors (its drivers' WithInstance and
// Open methods) take a session pg_advisory_lock to create the version table, which the pooler can
// leave on a pooled server connection where the next replica's constructor waits for it
// forever, so [Wrap] refuses their drivers there (advisory.ErrPooler, with the fix).
// [Open] creates the version table holding the advisory lock, never sends the
// constructor's own lock, and opens the driver's connections in pgx's exec mode (pgx's
// default statement cache fails through the pooler), so the same DSN works directly and
// through the pooler.
//
// The wrapper sets nothing on the driver's session there (a session setting would stay on
// a server session that other clients get next). It gives each migration the holding's
// tag for that migration's own transaction instead, in a statement run first with it, so
// that a later holder's drain still finds a killed holder's migration on the server and
// rolls it back. A migration with BEGIN ... COMMIT of its own keeps the tag up to its
// COMMIT, which ends the migration's transaction on the driver's connection, never the
// holding's. A migration of one statement that cannot run in a transaction block (CREATE
// INDEX CONCURRENTLY, as in golang-migrate's examples) is run alone and untagged: no
// setting can be local to it there, so the drain does not see it, and a replica killed
// during it leaves it running on the server until it ends (or its backend notices the
// closed connection), and its version dirty. Tagging holds for a migration run as one
// statement list, the drivers' default, not with MultiStatementEnabled.
//
// See the "golang-migrate as a library" section of docs/migrations.md in the advisory
// repository for the mixed case (wrapped and unwrapped replicas) and the recovery from a
// migration left dirty.
package advmigrate
