package advisory_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/pgadvisory/advisory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNamedStatementsArePreparedOnceUsedOften: on one connection (a pool of one), a name's
// lock is sent unprepared until the connection has run it advisory.PrepareNamedAt times,
// and prepared from then on: a fleet that locks many names from many connections pays
// one round trip per lock, never a prepare that its few further uses would not repay, and
// a name locked again and again still runs prepared. Seen from the holding session itself,
// in pg_prepared_statements.
func TestNamedStatementsArePreparedOnceUsedOften(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := newManager(t, []string{"pool_max_conns=1"})
	prepared := func(name string) int {
		l, err := m.Lock(ctx, name)
		require.NoError(t, err)
		defer l.Unlock(ctx)
		n := 0
		for _, text := range preparedNames(t, l) {
			if strings.Contains(text, name) {
				n++
			}
		}
		return n
	}
	a, b := t.Name()+"/a", t.Name()+"/b"
	for use := 1; use < advisory.PrepareNamedAt; use++ {
		require.Equal(t, 0, prepared(a), "a's lock number %d is not prepared", use)
	}
	assert.Equal(t, 0, prepared(b), "b's first lock is not prepared")
	assert.Equal(t, 1, prepared(a), "a's lock number %d prepared it", advisory.PrepareNamedAt)
	assert.Equal(t, 1, prepared(a), "and runs it")
	assert.Equal(t, 0, prepared(b), "b's second lock is not prepared")
	l, err := m.TryLock(ctx, a)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(context.Background()))
}

// TestPreparedNamesAreBoundedPerConnection: a connection prepares at most half its
// statement cache of named statements (here 4 of 8) and keeps those; names past the
// budget run unprepared. Ten names locked round-robin, more than the cache holds, each
// prepared at its second use: without the budget pgx evicts a prepared name to prepare
// the next, so the prepared set changes every round and most locks pay a prepare again.
func TestPreparedNamesAreBoundedPerConnection(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := newManager(t, []string{"pool_max_conns=1", "statement_cache_capacity=8"}, advisory.WithPrepareNamedAtForTest(2))
	namesNow := func() []string {
		// LockKey's statements carry no name: it adds nothing to what it reads.
		l, err := m.LockKey(ctx, advisory.KeyOf(t.Name()))
		require.NoError(t, err)
		defer l.Unlock(ctx)
		return preparedNames(t, l)
	}
	var first []string
	for round := 1; round <= 5; round++ {
		for i := 0; i < 10; i++ {
			l, err := m.Lock(ctx, fmt.Sprintf("%s/%d", t.Name(), i))
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctx))
		}
		got := namesNow()
		switch {
		case round == 1:
			assert.Empty(t, got, "round %d: a name's first lock is not prepared", round)
		case round == 2:
			assert.Len(t, got, 4, "round %d: the budget, half of the cache, is spent", round)
			first = got
		default:
			assert.Equal(t, first, got, "round %d: the prepared names are kept, none prepared again", round)
		}
	}
}

// TestCacheOfOneStatementPreparesNoName: a statement cache of one leaves no room for a
// name (half of one is none): a name locked again and again stays unprepared, so that it
// never evicts the unlock statement and is never prepared again. Read on the holding
// session right after its third lock, by the simple protocol, which touches no cache.
func TestCacheOfOneStatementPreparesNoName(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := newManager(t, []string{"pool_max_conns=1", "statement_cache_capacity=1"}, advisory.WithPrepareNamedAtForTest(2))
	for i := 0; i < 2; i++ {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		require.NoError(t, l.Unlock(ctx))
	}
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	defer l.Unlock(ctx)
	assert.Empty(t, preparedNames(t, l), "no name prepared")
}

// preparedNames returns the texts of the named lock statements prepared on l's session,
// sorted. It reads them on that session, by the simple protocol, which neither prepares
// nor touches the connection's statement cache.
func preparedNames(t *testing.T, l *advisory.Lock) []string {
	ctx := ctxT(t)
	var texts []string
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
		rows, err := tx.Query(ctx, `SELECT statement FROM pg_prepared_statements
			WHERE statement LIKE '/* advisory lock %' ORDER BY statement`, pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return err
		}
		texts, err = pgx.CollectRows(rows, pgx.RowTo[string])
		return err
	}))
	return texts
}
