package advisory_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNamedStatementsArePreparedFromTheirSecondUse: on one connection (a pool of one), a
// name's first lock is sent unprepared and its second prepares it: a fleet that locks
// many names from many connections pays one round trip per lock, not a prepare as well,
// and a name locked again and again still runs prepared. Seen from the holding session
// itself, in pg_prepared_statements.
func TestNamedStatementsArePreparedFromTheirSecondUse(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := newManager(t, []string{"pool_max_conns=1"})
	prepared := func(name string) int {
		l, err := m.Lock(ctx, name)
		require.NoError(t, err)
		defer l.Unlock(ctx)
		var n int
		require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
			return tx.QueryRow(ctx, `SELECT count(*) FROM pg_prepared_statements
				WHERE statement LIKE '/* advisory lock %' AND statement LIKE '%' || $1 || '%'`, name).Scan(&n)
		}))
		return n
	}
	a, b := t.Name()+"/a", t.Name()+"/b"
	assert.Equal(t, 0, prepared(a), "a's first lock is not prepared")
	assert.Equal(t, 0, prepared(b), "b's first lock is not prepared")
	assert.Equal(t, 1, prepared(a), "a's second lock prepared it")
	assert.Equal(t, 1, prepared(a), "and runs it")
	assert.Equal(t, 1, prepared(b))
	l, err := m.TryLock(ctx, a)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
}
