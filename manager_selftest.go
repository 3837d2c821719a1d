package advisory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

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
// session that could not connect or was ended: then the test is inconclusive and New
// goes on. A stub engine answers every statement, so it is never inconclusive.
func checkEnforced(ctx context.Context, conn *pgxpool.Conn, cc *pgconn.Config, kind Holding) error {
	if kind == HoldingTransaction {
		return checkEnforcedTx(ctx, conn, cc)
	}
	pg := conn.Conn().PgConn()
	_, token := ownership(pg)
	key := strconv.FormatInt(rand.Int64(), 10)
	owned := "CASE WHEN pg_catalog.current_setting('" + ownerSetting + "', true) OPERATOR(pg_catalog.=) '" + token + "' THEN "
	got, err := oneBool(pg.Exec(ctx, "SELECT "+owned+"pg_catalog.pg_try_advisory_lock("+key+") END").ReadAll())
	switch {
	case err != nil:
		return fmt.Errorf("advisory: check that the server enforces advisory locks: %w", err)
	case got == "":
		return fmt.Errorf("%w: the self-test statement ran on another client's backend; it did nothing there", ErrPooler)
	case got == "f":
		return nil // held elsewhere: refused, which is enforcement enough
	}
	both, berr := secondTry(ctx, cc, key)
	released, uerr := oneBool(pg.Exec(ctx, "SELECT "+owned+"pg_catalog.pg_advisory_unlock("+key+") END").ReadAll())
	if uerr != nil || released != "t" {
		conn.Conn().Close(ctx) // never back to the pool holding the key
	}
	return enforcedVerdict(both, berr, uerr != nil && !usable(pg, uerr))
}

// checkEnforcedTx is checkEnforced for transaction holdings: the first session takes the
// key as a transaction holding does (pg_try_advisory_xact_lock in an open transaction),
// the second tries it, and the first rolls back, which releases the key whatever
// happened (or its connection is closed, which does too). Behind a pooler the second
// session needs a server session of its own while the first's transaction keeps one:
// it waits at most selfTestWait for it, then the test is inconclusive.
func checkEnforcedTx(ctx context.Context, conn *pgxpool.Conn, cc *pgconn.Config) error {
	pg := conn.Conn().PgConn()
	key := strconv.FormatInt(rand.Int64(), 10)
	got, err := oneBoolOfLast(pg.Exec(ctx, "BEGIN; SELECT pg_catalog.pg_try_advisory_xact_lock("+key+")"))
	if err != nil || got != "t" {
		if _, rerr := pg.Exec(ctx, "ROLLBACK").ReadAll(); rerr != nil || pg.TxStatus() != 'I' {
			conn.Conn().Close(ctx)
		}
		if err != nil {
			return fmt.Errorf("advisory: check that the server enforces advisory locks: %w", err)
		}
		return nil // held elsewhere: refused, which is enforcement enough
	}
	sctx, cancel := context.WithTimeout(ctx, selfTestWait)
	both, berr := secondTry(sctx, cc, key)
	cancel()
	_, uerr := pg.Exec(ctx, "ROLLBACK").ReadAll()
	if uerr != nil || pg.TxStatus() != 'I' {
		conn.Conn().Close(ctx) // never back to the pool in a transaction that holds the key
	}
	return enforcedVerdict(both, berr, uerr != nil && !usable(pg, uerr))
}

// selfTestWait bounds the transaction self-test's second session (see checkEnforcedTx).
const selfTestWait = 5 * time.Second

// enforcedVerdict judges the self-test: both is the second session's answer ("t": it got
// the key the first held) or berr its failure; firstLost: the first session failed
// meanwhile, so the second's grant proves nothing.
func enforcedVerdict(both string, berr error, firstLost bool) error {
	var pgErr *pgconn.PgError
	switch {
	case berr != nil && errors.As(berr, &pgErr) && !serverEnded(berr):
		return fmt.Errorf("advisory: check that the server enforces advisory locks: %w", berr)
	case berr != nil, both != "t", firstLost:
		return nil // refused; or a session failed meanwhile (terminated, say): inconclusive
	}
	return fmt.Errorf("%w: the server granted the same advisory lock to two sessions at once: it does not "+
		"enforce advisory locks (CockroachDB's are stubs; YugabyteDB can turn them into no-ops), or a "+
		"pg_catalog's own advisory lock functions were replaced", ErrUnsupportedServer)
}

// secondTry tries the key on a new plain connection, and releases it at once if it got
// it, in one statement: "t" if it got it.
func secondTry(ctx context.Context, cc *pgconn.Config, key string) (string, error) {
	other, err := pgconn.ConnectConfig(ctx, cc.Copy())
	if err != nil {
		return "", fmt.Errorf("second connection: %w", err)
	}
	defer other.Close(ctx)
	return oneBool(other.Exec(ctx, "SELECT CASE WHEN pg_catalog.pg_try_advisory_lock("+key+") THEN pg_catalog.pg_advisory_unlock("+key+
		") ELSE false END").ReadAll())
}

// oneBoolOfLast is oneBool for a Query of several statements: the last one's value.
func oneBoolOfLast(mrr *pgconn.MultiResultReader) (string, error) {
	var got string
	err := lastRow(mrr, func(v [][]byte) error {
		if len(v) != 1 {
			return errNotOneRow
		}
		got = string(v[0])
		return nil
	})
	return got, err
}

// oneBool returns the text of the single value a one-row query returned ("t", "f", or ""
// for NULL).
func oneBool(rows []*pgconn.Result, err error) (string, error) {
	if err != nil {
		return "", err
	}
	row, err := onlyRow(rows, 1, "the self-test statement")
	if err != nil {
		return "", err
	}
	return string(row[0]), nil
}
