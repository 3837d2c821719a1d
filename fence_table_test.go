package advisory_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// oldFenceTable creates a fencing table of t's own in the layout of earlier versions
// (key bigint PRIMARY KEY), its primary key named pk (not the default <table>_pkey),
// with the given tokens, and drops it when t ends.
func oldFenceTable(t *testing.T, pk string, tokens map[advisory.Key]int64) string {
	t.Helper()
	table := "fence_old_" + advisory.KeyOf(t.Name()).String()
	quoted := pgx.Identifier{table}.Sanitize()
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+quoted) })
	_, err := admin.Exec(ctxT(t), fmt.Sprintf(`DROP TABLE IF EXISTS %s; CREATE TABLE %s (
		key      bigint CONSTRAINT %s PRIMARY KEY,
		token    bigint NOT NULL,
		taken_at timestamptz NOT NULL DEFAULT now())`, quoted, quoted, pgx.Identifier{pk}.Sanitize()))
	require.NoError(t, err)
	for k, tok := range tokens {
		_, err := admin.Exec(ctxT(t), "INSERT INTO "+quoted+" (key, token) VALUES ($1, $2)", int64(k), tok)
		require.NoError(t, err)
	}
	return table
}

// primaryKey returns the columns of table's primary key, and how many primary keys it
// has.
func primaryKey(t *testing.T, table string) ([]string, int) {
	t.Helper()
	var cols []string
	var n int
	require.NoError(t, admin.QueryRow(ctxT(t), `SELECT
		(SELECT count(*) FROM pg_constraint WHERE conrelid = $1::regclass AND contype = 'p'),
		ARRAY(SELECT a.attname::text FROM pg_constraint c JOIN pg_attribute a
			ON a.attrelid = c.conrelid AND a.attnum = ANY (c.conkey)
			WHERE c.conrelid = $1::regclass AND c.contype = 'p' ORDER BY a.attname)`,
		pgx.Identifier{table}.Sanitize()).Scan(&n, &cols))
	return cols, n
}

// TestOldFenceTableIsUpgraded: on a table of an earlier version's layout, Token and
// CheckToken fail with an error that names the fix, wrapping ErrNoFenceTable, and keep
// the lock; CreateFenceTable upgrades it in place, keeping every token (a key whose
// token was 5 gets 6; the pair of a key whose row says 9 gets 10: the old row counted
// both), after which
// tokens and checks work and a second call changes nothing. An older version's Token statement then fails: fail-closed.
func TestOldFenceTableIsUpgraded(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	other := advisory.KeyOf(name + "/other")
	table := oldFenceTable(t, "old_fence_key", map[advisory.Key]int64{advisory.KeyOf(name): 5, other: 9})
	m := newManager(t, nil, advisory.WithFenceTable(table))

	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	_, err = l.Token(ctx)
	require.ErrorIs(t, err, advisory.ErrNoFenceTable)
	require.ErrorContains(t, err, "has the layout of an earlier version: run Manager.CreateFenceTable or pgadvisory init-fencing to upgrade it")
	require.ErrorContains(t, err, table)
	require.NoError(t, l.Err(), "the lock is kept")
	requireHeldBy(t, l.Key(), l.PID())
	tx, err := admin.Begin(ctx)
	require.NoError(t, err)
	err = m.CheckToken(ctx, tx, name, 5)
	require.ErrorIs(t, err, advisory.ErrNoFenceTable)
	require.ErrorContains(t, err, "has the layout of an earlier version")
	require.NoError(t, tx.Rollback(ctx))

	require.NoError(t, m.CreateFenceTable(ctx))
	cols, n := primaryKey(t, table)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"key", "pair"}, cols)
	tok, err := l.Token(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(6), tok, "the old row's token was kept")
	tx, err = admin.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, m.CheckToken(ctx, tx, name, 6))
	require.ErrorIs(t, m.CheckTokenKey(ctx, tx, other, 8), advisory.ErrStaleToken)
	require.NoError(t, m.CheckTokenKey(ctx, tx, other, 9), "every row was kept")
	require.NoError(t, tx.Rollback(ctx))
	require.NoError(t, l.Unlock(ctx))
	// The old row counted the pair's tokens too: the pair goes on above them.
	pl, err := m.LockPair(ctx, advisory.Pair{Class: int32(other >> 32), Object: int32(other)})
	require.NoError(t, err)
	tok, err = pl.Token(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(10), tok, "the pair of the same 64 bits goes on from the old row's 9")
	require.NoError(t, pl.Unlock(ctx))

	require.NoError(t, m.CreateFenceTable(ctx), "idempotent")
	cols, n = primaryKey(t, table)
	require.Equal(t, 1, n)
	require.Equal(t, []string{"key", "pair"}, cols)

	// The Token statement of earlier versions, on the upgraded table.
	_, err = admin.Exec(ctx, `INSERT INTO `+pgx.Identifier{table}.Sanitize()+` AS f (key, token) SELECT $1, 1
		ON CONFLICT (key) DO UPDATE SET token = f.token + 1, taken_at = now() RETURNING token`, int64(other))
	require.ErrorContains(t, err, "42P10", "an older version's Token fails, never shares a row")
	requireNoAcquired(t, m)
}

// TestCreateFenceTableConcurrently: five Managers calling CreateFenceTable at once, on a
// table of an earlier version's layout and on a missing table, all succeed and leave one
// table with one primary key on (key, pair), its rows kept.
func TestCreateFenceTableConcurrently(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	key := advisory.KeyOf(t.Name() + "/key")
	old := oldFenceTable(t, "fence_old_pkey_"+advisory.KeyOf(t.Name()).String(), map[advisory.Key]int64{key: 3})
	fresh := "fence_new_" + advisory.KeyOf(t.Name()).String()
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{fresh}.Sanitize()) })
	for _, table := range []string{old, fresh} {
		ms := make([]*advisory.Manager, 5)
		for i := range ms {
			ms[i] = newManager(t, nil, advisory.WithFenceTable(table))
		}
		errs := make([]error, len(ms))
		var wg sync.WaitGroup
		start := make(chan struct{})
		for i, m := range ms {
			wg.Add(1)
			go func() {
				defer wg.Done()
				<-start
				errs[i] = m.CreateFenceTable(ctx)
			}()
		}
		close(start)
		wg.Wait()
		for i, err := range errs {
			require.NoError(t, err, "%s: Manager %d", table, i)
		}
		cols, n := primaryKey(t, table)
		require.Equal(t, 1, n, table)
		require.Equal(t, []string{"key", "pair"}, cols, table)
		l, err := ms[0].LockKey(ctx, key)
		require.NoError(t, err)
		tok, err := l.Token(ctx)
		require.NoError(t, err)
		if table == old {
			require.Equal(t, int64(4), tok, "the old row's token was kept")
		} else {
			require.Equal(t, int64(1), tok)
		}
		require.NoError(t, l.Unlock(ctx))
	}
}
