package advisory

import "fmt"

// A lock taken on a hot standby is local to it: it excludes nobody on the primary
// (PostgreSQL grants advisory locks in recovery). A connection's set-up refuses a standby
// (lookSQL), but a load balancer between client and servers (Pgpool-II with
// load_balance_mode, PgCat with default_role = "any") chooses a server per session, or
// per statement, by what it takes the statement to be: Pgpool-II configured with a
// write_function_list, as its docs show, takes pg_advisory_xact_lock for a read and may
// send it to a standby. So every lock statement that can reach a server other than the
// one its connection's set-up checked proves, in the same statement, that it runs on a
// primary: it takes nothing where pg_is_in_recovery() is true (a session holding's
// unlock releases nothing there either: the caller closes the connection, which does),
// and says so by returning 0 as its backend pid (a backend's pid is never 0; a statement
// whose lock result cannot otherwise be NULL, a transaction holding's or XactLock's,
// returns NULL there instead, asking pg_is_in_recovery() once), which the library turns
// into ErrStandby. The proof costs no round trip.
//
// A direct connection (see look.directPath) needs none: its socket ends at the very
// backend its set-up found out of recovery, and a server never goes back into recovery
// while its sessions live (a demoted primary is restarted), so every statement there
// runs on a primary.
//
// pg_is_in_recovery() may be asked twice in one statement (for the pid, then before the
// lock function): a promotion between the two reads gives pid 0 and a lock taken on the
// new primary, which the caller, told ErrStandby, releases by closing the connection. The
// reverse cannot happen: recovery never starts again in a running server.
const (
	// inRecovery is true on a standby. Pgpool-II sends a statement that calls it, a
	// VOLATILE function, where it sends writes unless its function lists say otherwise.
	inRecovery = "pg_catalog.pg_is_in_recovery()"
	// onPrimary is the condition every lock function is made conditional on.
	onPrimary = "NOT " + inRecovery
	// backendOnPrimary is the pid column of a lock statement: the backend's pid, or 0 on
	// a standby.
	backendOnPrimary = "CASE WHEN " + inRecovery + " THEN 0 ELSE pg_catalog.pg_backend_pid() END"
	// lockRowStart starts the row of a lock statement that reports its backend.
	lockRowStart = "SELECT " + backendOnPrimary + ", "
	// ownedOnPrimary is ownedBy, on a primary only.
	ownedOnPrimary = onPrimary + " AND " + ownedBy
)

// standbyError is the error of a lock statement that ran on a standby (it returned pid 0)
// and took nothing there.
func standbyError() error {
	return fmt.Errorf("%w: the lock statement ran on a server in recovery and took nothing there: a load "+
		"balancer in the path (Pgpool-II with load_balance_mode?) sent it to a standby; connect to the primary, or "+
		"have the load balancer send this client's statements there (Pgpool-II: app_name_redirect_preference_list, "+
		"see docs/guarantees.md)", ErrStandby)
}
