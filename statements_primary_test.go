package advisory_test

import (
	"context"
	"fmt"
	"strconv"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestLockStatementsProveAPrimary (issue 43, "a holding proves it is on a primary in the
// statement that takes it"; issue 44 item 6): a load balancer may send any one lock
// statement to a standby, whatever server the connection's set-up checked. Every lock
// statement the library sends where that can happen, run on a real hot standby as if
// balanced there (the session carrying the connection's ownership token, so that only
// the primary proof can stop it), must take nothing there (the standby's pg_locks) and
// report it (pid 0); XactLock and TryXactLock in every mode must return ErrStandby.
// Before, each was granted the key on the standby.
func TestLockStatementsProveAPrimary(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	sb := pgtest.StandbyForTest(t, srv)
	ctx := ctxT(t)
	conn, look := connectStandby(t, sb.DSN()), connectStandby(t, sb.DSN())
	const token = "0123456789abcdef"
	_, err := conn.Exec(ctx, "SELECT pg_catalog.set_config('advisory.owner', $1, false)", token)
	require.NoError(t, err)
	key := advisory.KeyOf(t.Name())
	for _, lt := range advisory.LockTextsForTest(key, token) {
		pid, lockNull, err := firstColumns(ctx, conn, lt)
		require.NoError(t, err, "%s: %s", lt.Name, lt.SQL)
		assert.True(t, pid == 0 || lockNull, "%s: the statement says it ran on a standby (pid %d)", lt.Name, pid)
		requireNoStandbyLocks(t, look, lt.Name)
		if conn.PgConn().TxStatus() != 'I' {
			_, err := conn.Exec(ctx, "ROLLBACK")
			require.NoError(t, err)
		}
	}
	xact := map[string]func(context.Context, pgx.Tx, string) error{
		"XactLock": advisory.XactLock, "XactLockShared": advisory.XactLockShared,
		"TryXactLock": advisory.TryXactLock, "TryXactLockShared": advisory.TryXactLockShared,
	}
	for form, lock := range xact {
		tx, err := conn.Begin(ctx)
		require.NoError(t, err)
		err = lock(ctx, tx, t.Name())
		require.ErrorIs(t, err, advisory.ErrStandby, form)
		t.Logf("%s: %v", form, err)
		requireNoStandbyLocks(t, look, form)
		require.NoError(t, tx.Rollback(ctx))
	}
}

func connectStandby(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctxT(t), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// firstColumns runs a lock statement and returns its row's first column, the pid, and
// whether its second, the lock's result, is NULL.
func firstColumns(ctx context.Context, conn *pgx.Conn, lt advisory.LockTextForTest) (int64, bool, error) {
	if lt.Args != nil {
		rows, err := conn.Query(ctx, lt.SQL, lt.Args...)
		if err != nil {
			return -1, false, err
		}
		vals, err := pgx.CollectExactlyOneRow(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		if err != nil {
			return -1, false, err
		}
		pid, err := strconv.ParseInt(fmt.Sprint(vals[0]), 10, 64)
		return pid, vals[1] == nil, err
	}
	rr, err := conn.PgConn().Exec(ctx, lt.SQL).ReadAll()
	if err != nil {
		return -1, false, err
	}
	last := rr[len(rr)-1]
	if len(last.Rows) != 1 {
		return -1, false, nil
	}
	pid, err := strconv.ParseInt(string(last.Rows[0][0]), 10, 64)
	return pid, last.Rows[0][1] == nil, err
}

func requireNoStandbyLocks(t *testing.T, look *pgx.Conn, what string) {
	t.Helper()
	var n int
	require.NoError(t, look.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").Scan(&n))
	require.Zero(t, n, "%s: advisory locks granted on the standby", what)
}
