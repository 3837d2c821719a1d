package advisory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// warnAtCommit creates a table whose rows raise a WARNING when their transaction commits
// (a deferred constraint trigger), as the server does when a commit's wait for a
// synchronous standby is cancelled. The real failover is faults' test; this one checks
// that every commit the library makes reads the warning.
func warnAtCommit(t *testing.T) string {
	t.Helper()
	table := fmt.Sprintf("warn_at_commit_%d", rand.Uint32())
	_, err := admin.Exec(ctxT(t), `
		CREATE TABLE `+table+` (key bigint NOT NULL, pair boolean NOT NULL DEFAULT false, token bigint NOT NULL,
		  taken_at timestamptz NOT NULL DEFAULT now(), PRIMARY KEY (key, pair));
		CREATE FUNCTION `+table+`_warn() RETURNS trigger LANGUAGE plpgsql AS
		  $$BEGIN RAISE WARNING 'canceling wait for synchronous replication (test)'; RETURN NULL; END$$;
		CREATE CONSTRAINT TRIGGER warn AFTER INSERT OR UPDATE ON `+table+`
		  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION `+table+`_warn()`)
	require.NoError(t, err)
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP TABLE "+table+"; DROP FUNCTION "+table+"_warn()")
	})
	return table
}

// TestUnconfirmedCommitsAreNeverReportedDone: a token whose commit came with a WARNING is
// not returned (ErrCommitUnconfirmed), the lock is kept and no token is cached; a fenced
// transaction whose COMMIT came with one returns ErrCommitUnconfirmed (it did commit
// locally), and so does DoTx.
func TestUnconfirmedCommitsAreNeverReportedDone(t *testing.T) {
	t.Parallel()
	table := warnAtCommit(t)
	m := newManager(t, nil, advisory.WithFenceTable(table))
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	tok, err := l.Token(ctx)
	require.ErrorIs(t, err, advisory.ErrCommitUnconfirmed)
	require.Zero(t, tok)
	require.Contains(t, err.Error(), "canceling wait for synchronous replication (test)")
	require.NoError(t, l.Err(), "the lock is kept")
	requireHeldBy(t, advisory.KeyOf(t.Name()), l.PID())
	_, err = l.Token(ctx)
	require.ErrorIs(t, err, advisory.ErrCommitUnconfirmed, "no token was cached: the next call takes a new one")

	insert := func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" (key, token) VALUES ($1, 1) ON CONFLICT (key, pair) DO UPDATE SET token = 7", rand.Int64())
		return err
	}
	err = l.BeginFunc(ctx, insert)
	require.ErrorIs(t, err, advisory.ErrCommitUnconfirmed)
	require.NoError(t, l.Err())
	require.NoError(t, l.BeginFunc(ctx, func(pgx.Tx) error { return nil }), "a commit without a warning")
	require.NoError(t, l.Unlock(ctx))
	err = m.DoTx(ctx, t.Name(), func(_ context.Context, tx pgx.Tx) error { return insert(tx) })
	require.ErrorIs(t, err, advisory.ErrCommitUnconfirmed)
	require.NoError(t, m.CreateFenceTable(ctx), "a current table: read, nothing committed")
	requireNoAcquired(t, m)
}
