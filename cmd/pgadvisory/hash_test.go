package main_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestHashSlotsMatchTheSemaphore: the keys hash --slots prints are the ones a Semaphore
// of the library takes.
func TestHashSlotsMatchTheSemaphore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	m, err := advisory.New(ctx, dsn(t))
	require.NoError(t, err)
	defer m.Close()
	s, err := m.Semaphore("workers", 3)
	require.NoError(t, err)
	r := cli(t, "hash", "--slots", "3", "workers")
	require.Equal(t, 0, r.code, r.stderr)
	for i, k := range s.SlotKeys() {
		assert.Contains(t, r.stdout, fmt.Sprintf("SELECT pg_try_advisory_lock(%d);  -- workers#slot/%d\n", k, i))
	}
	assert.Contains(t, r.stdout, fmt.Sprintf("SELECT pg_advisory_lock(%d);  -- workers#turnstile\n", s.TurnstileKey()))
	assert.Equal(t, 3, strings.Count(r.stdout, "#slot/"))
	assert.Equal(t, 64, cli(t, "hash", "--slots", "-1", "workers").code)
	assert.Equal(t, 64, cli(t, "hash", "--slots", fmt.Sprint(advisory.MaxSemaphoreLimit+1), "workers").code)
}

// TestHashPooledFormHoldsThroughATransactionPooler (issue 43, item 12): the transaction
// form hash prints, run line by line as psql would through PgBouncer in transaction mode,
// holds the lock until its COMMIT and leaves nothing on the pooled server connection;
// the session lines, run the same way, leave the lock held after the client is gone.
func TestHashPooledFormHoldsThroughATransactionPooler(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	ctx := context.Background()
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(1))
	name := t.Name()
	r := noDB(t, "hash", name)
	require.Equal(t, 0, r.code, r.stderr)
	key := advisory.KeyOf(name)
	pooled := pooledLines(t, r.stdout)
	require.Equal(t, []string{"BEGIN;", fmt.Sprintf("SELECT pg_advisory_xact_lock(%d);", key), "COMMIT;"}, pooled)

	observer, err := pgx.Connect(ctx, dsn(t))
	require.NoError(t, err)
	t.Cleanup(func() { observer.Close(ctx) })
	free := func() bool {
		var got bool
		require.NoError(t, observer.QueryRow(ctx, "SELECT pg_try_advisory_lock($1)", int64(key)).Scan(&got))
		if got {
			_, err := observer.Exec(ctx, "SELECT pg_advisory_unlock($1)", int64(key))
			require.NoError(t, err)
		}
		return got
	}
	c, err := pgx.Connect(ctx, b.DSN())
	require.NoError(t, err)
	for _, line := range pooled[:2] {
		_, err := c.Exec(ctx, line) // no arguments: the simple protocol, as psql sends it
		require.NoError(t, err, line)
	}
	assert.False(t, free(), "held between BEGIN and COMMIT")
	_, err = c.Exec(ctx, pooled[2])
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
	assert.True(t, free(), "COMMIT released it: nothing stays on the pooled server connection")

	session := fmt.Sprintf("SELECT pg_advisory_lock(%d);", key)
	require.Contains(t, r.stdout, session+"\n")
	c, err = pgx.Connect(ctx, b.DSN())
	require.NoError(t, err)
	_, err = c.Exec(ctx, session)
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
	assert.False(t, free(), "the session line strands the lock on the pooler's server connection")
	c, err = pgx.Connect(ctx, b.DSN()) // the pool's one server connection: the stranded lock's
	require.NoError(t, err)
	_, err = c.Exec(ctx, "SELECT pg_advisory_unlock_all()")
	require.NoError(t, err)
	require.NoError(t, c.Close(ctx))
}

// pooledLines returns the SQL lines of hash's transaction form, in order, without its
// comments and its try line.
func pooledLines(t *testing.T, out string) []string {
	t.Helper()
	_, form, ok := strings.Cut(out, "-- through a transaction pooler")
	require.True(t, ok, out)
	var lines []string
	for _, l := range strings.Split(form, "\n") {
		if strings.HasPrefix(l, "BEGIN;") || strings.HasPrefix(l, "SELECT pg_advisory_xact_lock(") || strings.HasPrefix(l, "COMMIT;") {
			lines = append(lines, l)
		}
	}
	return lines
}
