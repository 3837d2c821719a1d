package advisory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// The engine self-test. Servers that speak PostgreSQL's protocol and report a
// PostgreSQL server_version may still not enforce advisory locks: CockroachDB's
// session-level pg_advisory_lock family is a stub that grants every call, and YugabyteDB
// can be set to turn unsupported advisory locks into silent no-ops; a superuser may have
// replaced pg_catalog's functions. Any of them would let two holders in at once,
// silently. (A function earlier in the search_path cannot: every statement names
// pg_catalog's, see ownedBy.) So New
// proves the lock excludes: a random key taken on one session must be refused on a
// second.
//
// Nothing may be left held, even behind a pooler that the set-up did not catch: the
// first session's statements run only on its own backend (the ownership token, as the
// lock statements do; the simple protocol, so no prepared statement can go missing), and
// the second session takes and releases the key in one statement.

// checkEnforced runs the self-test on conn, one of the pool's set-up connections, and a
// second, plain connection made from cc. conn releases the key, or is closed if that
// cannot be confirmed. A second session that got the key proves nothing if the first's
// session ended meanwhile (an operator or a fault terminated it), nor does a second
// session that could not connect or was ended: then the test is inconclusive, New says
// so at Warn and goes on. A stub engine answers every statement, so it is never
// inconclusive.
func checkEnforced(ctx context.Context, conn *pgxpool.Conn, cc *pgconn.Config, kind Holding, logger *slog.Logger) error {
	if kind == HoldingTransaction {
		return checkEnforcedTx(ctx, conn, cc, logger)
	}
	pg := conn.Conn().PgConn()
	pid, token := ownership(pg)
	key := rand.Int64()
	owned := "CASE WHEN pg_catalog.current_setting('" + ownerSetting + "', true) OPERATOR(pg_catalog.=) '" + token + "' THEN "
	lit := strconv.FormatInt(key, 10)
	got, err := oneBool(pg.Exec(ctx, "SELECT "+owned+"pg_catalog.pg_try_advisory_lock("+lit+") END, "+inRecovery).ReadAll())
	switch {
	case err != nil:
		return fmt.Errorf("advisory: check that the server enforces advisory locks: %w", err)
	case got == "":
		takeBack(ctx, conn, pid, token, key, logger)
		return &poolerSign{"the self-test statement ran on another client's backend; it did nothing there"}
	case got == "f":
		return nil // held elsewhere: refused, which is enforcement enough
	}
	both, bpid, theirs, berr := secondTry(ctx, cc, lit, nil)
	changed := otherServer(ctx, pg, both, berr, theirs)
	released, uerr := oneBool(pg.Exec(ctx, "SELECT "+owned+"pg_catalog.pg_advisory_unlock("+lit+") END, "+inRecovery).ReadAll())
	switch {
	case berr == nil && bpid == pid:
		takeBack(ctx, conn, pid, token, key, logger)
		return &poolerSign{fmt.Sprintf("the self-test's second connection was given the first's backend (pid %d)", pid)}
	case uerr == nil && released == "":
		takeBack(ctx, conn, pid, token, key, logger)
		return &poolerSign{"the self-test's release ran on another client's backend; it did nothing there"}
	case uerr != nil || released != "t":
		conn.Conn().Close(ctx) // never back to the pool holding the key
	}
	if changed != nil {
		return changed
	}
	return enforcedVerdict(logger, both, berr, uerr != nil && !usable(pg, uerr))
}

// takeBackRounds bounds takeBack: each round is one statement, which a transaction
// pooler runs on whichever backend it hands the connection.
const takeBackRounds = 16

// takeBack undoes, on a connection whose backend (pid) New's self-test found shared, what
// the connection's set-up and self-test left there: the self-test's key if it still
// holds it, and the ownership token. The statement does it only where the token is, so
// it is sent until it lands there, at most takeBackRounds times; then the connection is
// closed. What it could not take back is reported at Warn: a key no one else uses, and
// a token that tells any later lock connection given that backend that it is shared.
func takeBack(ctx context.Context, conn *pgxpool.Conn, pid uint32, token string, key int64, logger *slog.Logger) {
	pg := conn.Conn().PgConn()
	defer conn.Conn().Close(ctx)
	sql := takeBackSQL(token, key)
	for range takeBackRounds {
		rows, err := pg.Exec(ctx, sql).ReadAll()
		if err != nil {
			break
		}
		if len(rows) == 1 && len(rows[0].Rows) == 1 {
			return
		}
	}
	if logger != nil {
		logAttrs(logger, slog.LevelWarn, "advisory: New found that the proxy shares server sessions between "+
			"clients after its connection's set-up had left an ownership token on one, and could not take it back: "+
			"the token stays on that server session until the proxy closes it; later lock connections given it "+
			"take it as a sign of sharing, as it is", slog.Uint64("pid", uint64(pid)))
	}
}

// takeBackSQL is takeBack's statement: one row where the token is (it releases the key
// if the backend holds it, and clears the token), none elsewhere.
func takeBackSQL(token string, key int64) string {
	classid, objid := strconv.FormatUint(uint64(key)>>32, 10), strconv.FormatUint(uint64(key)&0xffffffff, 10)
	return "SELECT pg_catalog.set_config('" + ownerSetting + "', NULL, false), (SELECT pg_catalog.count(" +
		"pg_catalog.pg_advisory_unlock(" + strconv.FormatInt(key, 10) + ")) FROM pg_catalog.pg_locks WHERE locktype " +
		"OPERATOR(pg_catalog.=) 'advisory' AND pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND granted " +
		"AND classid OPERATOR(pg_catalog.=) " + classid + " AND objid OPERATOR(pg_catalog.=) " + objid +
		" AND objsubid OPERATOR(pg_catalog.=) 1) WHERE pg_catalog.current_setting('" + ownerSetting +
		"', true) OPERATOR(pg_catalog.=) '" + token + "'"
}

// checkEnforcedTx is checkEnforced for transaction holdings: the first session takes the
// key as a transaction holding does (pg_try_advisory_xact_lock in an open transaction),
// the second tries it, and the first rolls back, which releases the key whatever
// happened (or its connection is closed, which does too). Behind a pooler the second
// session needs a server session of its own while the first's transaction keeps one
// (see secondTryBeside).
func checkEnforcedTx(ctx context.Context, conn *pgxpool.Conn, cc *pgconn.Config, logger *slog.Logger) error {
	pg := conn.Conn().PgConn()
	key := strconv.FormatInt(rand.Int64(), 10)
	var first uint32
	got, err := oneBoolOfLast(pg.Exec(ctx, "BEGIN; SELECT pg_catalog.pg_backend_pid(), pg_catalog.pg_try_advisory_xact_lock("+key+")"), &first)
	if err != nil || got != "t" {
		if _, rerr := pg.Exec(ctx, "ROLLBACK").ReadAll(); rerr != nil || pg.TxStatus() != 'I' {
			conn.Conn().Close(ctx)
		}
		if err != nil {
			return fmt.Errorf("advisory: check that the server enforces advisory locks: %w", err)
		}
		return nil // held elsewhere: refused, which is enforcement enough
	}
	both, bpid, theirs, berr := secondTryBeside(ctx, pg, cc, key, logger)
	changed := otherServer(ctx, pg, both, berr, theirs)
	_, uerr := pg.Exec(ctx, "ROLLBACK").ReadAll()
	if uerr != nil || pg.TxStatus() != 'I' {
		conn.Conn().Close(ctx) // never back to the pool in a transaction that holds the key
	}
	if berr == nil && bpid == first {
		return fmt.Errorf("%w: the self-test's second connection was given the backend (pid %d) on which the "+
			"first's transaction was open: the proxy does not keep a transaction on one server session", ErrPooler, bpid)
	}
	if changed != nil {
		return changed
	}
	return enforcedVerdict(logger, both, berr, uerr != nil && !usable(pg, uerr))
}

// enforcedVerdict judges the self-test: both is the second session's answer ("t": it got
// the key the first held) or berr its failure; firstLost: the first session failed
// meanwhile, so the second's grant proves nothing. An inconclusive test is said at Warn
// (the check was skipped, and that is never silent), unless secondTryBeside said why
// already (errNoServerSession).
func enforcedVerdict(logger *slog.Logger, both string, berr error, firstLost bool) error {
	var pgErr *pgconn.PgError
	switch {
	case berr != nil && errors.As(berr, &pgErr) && !serverEnded(berr):
		return fmt.Errorf("advisory: check that the server enforces advisory locks: %w", berr)
	case berr != nil:
		if !errors.Is(berr, errNoServerSession) {
			sayCheckSkipped(logger, "the self-test's second connection failed", slog.String("cause", berr.Error()))
		}
		return nil // it could not connect, was ended, or got no answer in time: inconclusive
	case both != "t":
		return nil // refused
	case firstLost:
		sayCheckSkipped(logger, "the self-test's first session ended while the second tried the key")
		return nil // the second's grant proves nothing
	}
	return fmt.Errorf("%w: the server granted the same advisory lock to two sessions at once: it does not "+
		"enforce advisory locks (CockroachDB's are stubs; YugabyteDB can turn them into no-ops), or a "+
		"pg_catalog's own advisory lock functions were replaced", ErrUnsupportedServer)
}

// secondTry tries the key on a new plain connection, and releases it at once if it got
// it, in one statement: "t" if it got it, "" if the statement ran on a standby, the
// backend it ran on, and the server's identity (see serverOfSQL). It closes connected,
// if not nil, once connected.
func secondTry(ctx context.Context, cc *pgconn.Config, key string, connected chan<- struct{}) (
	got string, pid uint32, server string, err error) {
	other, err := pgconn.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		return "", 0, "", fmt.Errorf("second connection: %w", err)
	}
	defer other.Close(ctx)
	if connected != nil {
		close(connected)
	}
	// A standby grants the key locally: a load balancer (Pgpool-II) that sent the second
	// session's statement there proves nothing, so the statement answers NULL there
	// (inconclusive) and takes nothing.
	err = lastRow(other.Exec(ctx, "SELECT pg_catalog.pg_backend_pid(), CASE WHEN "+inRecovery+" THEN NULL WHEN "+
		"pg_catalog.pg_try_advisory_lock("+key+") THEN pg_catalog.pg_advisory_unlock("+key+") ELSE false END, "+
		serverOfSQL), func(v [][]byte) error {
		if len(v) != 3 {
			return errNotOneRow
		}
		got, server = string(v[1]), string(v[2])
		pid, err = parseUint32(v[0], "pg_backend_pid()")
		return err
	})
	return got, pid, server, err
}

// oneBoolOfLast reads the last row of a Query of one or more statements: a backend pid
// into pid and, as oneBool does, a boolean's text.
func oneBoolOfLast(mrr *pgconn.MultiResultReader, pid *uint32) (string, error) {
	var got string
	err := lastRow(mrr, func(v [][]byte) error {
		if len(v) != 2 {
			return errNotOneRow
		}
		n, err := parseUint32(v[0], "pg_backend_pid()")
		*pid, got = n, string(v[1])
		return err
	})
	return got, err
}

// oneBool returns the text of the first value a one-row self-test statement returned
// ("t", "f", or "" for NULL). The second is pg_is_in_recovery(): a statement that a load
// balancer (Pgpool-II, balancing each statement) sent to a standby, where the connection's
// token is not, did nothing there and is no sign of sharing; it fails with ErrStandby.
func oneBool(rows []*pgconn.Result, err error) (string, error) {
	if err != nil {
		return "", err
	}
	row, err := onlyRow(rows, 2, "the self-test statement")
	switch {
	case err != nil:
		return "", err
	case string(row[1]) == "t":
		return "", fmt.Errorf("%w: a self-test statement ran on a server in recovery: a load balancer in the path "+
			"(Pgpool-II with load_balance_mode?) sends this connection's statements to a standby; connect to the "+
			"primary, or have the load balancer send this client's statements there (see docs/guarantees.md)", ErrStandby)
	}
	return string(row[0]), nil
}
