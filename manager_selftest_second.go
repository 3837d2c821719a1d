package advisory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The self-test's second session (see checkEnforced): which server it reached, and how
// long the transaction self-test waits for it behind a pooler.

// serverOfSQL tells servers apart: the address and port the session reached and when its
// postmaster started. Two sessions of one server agree, whatever pooler stands between;
// a proxy that sends the second to another server (round-robin, or a switchover under
// way) cannot make them agree. All three are allowed to every role, unlike
// pg_control_system()'s system identifier.
const serverOfSQL = "pg_catalog.concat_ws(' ', pg_catalog.inet_server_addr(), pg_catalog.inet_server_port(), " +
	"pg_catalog.pg_postmaster_start_time())"

// otherServer checks, where the second session got the key the first held (which
// would name the engine one that does not enforce advisory locks), that both sessions
// reached the same server: theirs is the second's serverOfSQL. It returns an error
// wrapping ErrServerChanged if they did not; nil otherwise, or if the first session
// cannot tell (the verdict then stands).
func otherServer(ctx context.Context, pg *pgconn.PgConn, both string, berr error, theirs string) error {
	if berr != nil || both != "t" {
		return nil
	}
	var mine string
	err := lastRow(pg.Exec(ctx, "SELECT "+serverOfSQL), func(v [][]byte) error {
		if len(v) != 1 {
			return errNotOneRow
		}
		mine = string(v[0])
		return nil
	})
	if err != nil || mine == theirs {
		return nil
	}
	return fmt.Errorf("%w: New's self-test made two connections with one connection string and they reached "+
		"two servers (%s, then %s): a proxy that spreads connections over servers, or a cluster switching "+
		"over to a new primary; retry once the switchover is over, or connect to the primary alone",
		ErrServerChanged, mine, theirs)
}

// The transaction self-test's second session needs a server session of its own while
// the first's transaction keeps one. A pooler whose pool has room opens one at once; one
// whose pool is full (default_pool_size = 1, say) makes it wait until the first's
// transaction ends, which it never does first. So the first session watches the server
// once the second has connected to the pooler and waits: a pooler with an idle server
// session hands it over at once; one with room opens a new one, which the server shows
// (a session of the same client address, role and database, started since the first's
// transaction began), and the second then waits up to selfTestWait. Once the first has
// seen none for noSpareFor, the test is inconclusive, and New says so at Warn.
const (
	selfTestWait = 5 * time.Second
	noSpareFor   = time.Second
	spareLook    = 50 * time.Millisecond
)

// spareSQL reports whether a server session the pooler may have opened for the second
// connection exists (see above). now() is the start of the first's transaction; the
// statistics snapshot a transaction keeps is cleared first.
const spareSQL = "SELECT pg_catalog.pg_stat_clear_snapshot(); SELECT EXISTS (SELECT FROM pg_catalog.pg_stat_activity " +
	"WHERE pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid() AND datname OPERATOR(pg_catalog.=) " +
	"pg_catalog.current_database() AND usename OPERATOR(pg_catalog.=) SESSION_USER AND client_addr IS NOT " +
	"DISTINCT FROM pg_catalog.inet_client_addr() AND backend_start OPERATOR(pg_catalog.>=) pg_catalog.now())"

type secondResult struct {
	got    string
	pid    uint32
	server string
	err    error
}

// errNoServerSession is secondTryBeside's error when the pooler gave the second session
// no server session; it has said so at Warn already.
var errNoServerSession = errors.New("no server session from the pooler")

// sayCheckSkipped says at Warn that New's engine self-test could not conclude, and why.
func sayCheckSkipped(logger *slog.Logger, why string, attrs ...slog.Attr) {
	logAttrs(logger, slog.LevelWarn, "advisory: New could not check that the server enforces advisory locks: "+
		why+"; the check was skipped", attrs...)
}

// secondTryBeside runs secondTry while pg, the first session, keeps the key in its
// transaction, bounded as said above. A failure of pg's own look ends the test as
// inconclusive: pg's transaction, and the key with it, may be gone.
func secondTryBeside(ctx context.Context, pg *pgconn.PgConn, cc *pgconn.Config, key string,
	logger *slog.Logger) (string, uint32, string, error) {
	sctx, cancel := context.WithTimeout(ctx, selfTestWait)
	defer cancel()
	done, connected := make(chan secondResult, 1), make(chan struct{})
	go func() {
		var r secondResult
		r.got, r.pid, r.server, r.err = secondTry(sctx, cc, key, connected)
		done <- r
	}()
	tick := time.NewTicker(spareLook)
	defer tick.Stop()
	start, seen := time.Now(), time.Now()
	for {
		select {
		case r := <-done:
			return r.got, r.pid, r.server, r.err
		case <-tick.C:
		}
		select {
		case <-connected:
		default:
			seen = time.Now() // not waiting for a server session yet
			continue
		}
		spare, err := spareSession(ctx, pg)
		switch {
		case err != nil:
			cancel()
			<-done
			return "", 0, "", fmt.Errorf("the self-test's first session failed: %v", err) // no %w: not the second's
		case spare:
			seen = time.Now()
		case time.Since(seen) >= noSpareFor:
			cancel()
			r := <-done
			if r.err == nil { // it got its answer as it was cancelled
				return r.got, r.pid, r.server, nil
			}
			sayCheckSkipped(logger, "the pooler gave the self-test's second connection no server session while the "+
				"first's transaction kept one (its pool for this role and database is full: default_pool_size = 1, "+
				"or every server session busy)", slog.Duration("waited", time.Since(start)))
			return "", 0, "", fmt.Errorf("second connection: %w: %v", errNoServerSession, r.err)
		}
	}
}

// spareSession runs spareSQL on pg.
func spareSession(ctx context.Context, pg *pgconn.PgConn) (bool, error) {
	var spare bool
	err := lastRow(pg.Exec(ctx, spareSQL), func(v [][]byte) error {
		if len(v) != 1 {
			return errNotOneRow
		}
		spare = string(v[0]) == "t"
		return nil
	})
	return spare, err
}
