package advisory_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// preparedOn returns the prepared statements of the held lock's own session (name →
// text), read in a transaction on its connection (by the simple protocol, so it adds none).
func preparedOn(t *testing.T, l *advisory.Lock) map[string]string {
	t.Helper()
	out := map[string]string{}
	require.NoError(t, l.BeginFunc(ctxT(t), func(tx pgx.Tx) error {
		// The simple protocol: this query prepares nothing, and works after a DEALLOCATE ALL
		// that pgx's statement cache did not see.
		rows, err := tx.Query(ctxT(t), "SELECT name, statement FROM pg_prepared_statements",
			pgx.QueryExecModeSimpleProtocol)
		if err != nil {
			return err
		}
		for rows.Next() {
			var name, text string
			if err := rows.Scan(&name, &text); err != nil {
				return err
			}
			out[name] = text
		}
		return rows.Err()
	}))
	return out
}

// lockStatements returns those of prepared whose text calls an advisory lock function.
func lockStatements(prepared map[string]string) map[string]string {
	out := map[string]string{}
	for name, text := range prepared {
		if strings.Contains(text, "advisory_") {
			out[name] = text
		}
	}
	return out
}

// TestKeyStatementsArePreparedByTheLibrary checks the direct key statements' own path
// (pin_prepared.go): on a direct connection in pgx's default mode, LockKey, TryLockKey and
// Unlock run the library's own prepared statements, one per text for the connection's
// life, and the locks they take and release are the server's (pg_locks).
func TestKeyStatementsArePreparedByTheLibrary(t *testing.T) {
	ctx := ctxT(t)
	m := newManager(t, []string{"pool_max_conns=1"})
	key := advisory.KeyOf(t.Name())
	var pid uint32
	for i := range 20 {
		var l *advisory.Lock
		var err error
		if i%2 == 0 {
			l, err = m.LockKey(ctx, key)
		} else {
			l, err = m.TryLockKey(ctx, key)
		}
		require.NoError(t, err)
		requireHeldBy(t, key, l.PID())
		if pid == 0 {
			pid = l.PID()
		}
		require.Equal(t, pid, l.PID(), "one connection: the pool holds one")
		require.NoError(t, l.Unlock(ctx))
		requireFree(t, key)
	}
	l, err := m.LockKey(ctx, key)
	require.NoError(t, err)
	got := lockStatements(preparedOn(t, l))
	require.NoError(t, l.Unlock(ctx))
	require.Len(t, got, 3, "lock, try lock and unlock, each prepared once: %v", got)
	for _, name := range []string{"advisory_lock", "advisory_try_lock", "advisory_unlock"} {
		require.Contains(t, got, name)
	}
	require.Contains(t, got["advisory_lock"], "pg_catalog.pg_advisory_lock($1)")
	require.Contains(t, got["advisory_try_lock"], "pg_catalog.pg_try_advisory_lock($1)")
	require.Contains(t, got["advisory_unlock"], "pg_catalog.pg_advisory_unlock($1)")
	requireFree(t, key)
}

// TestKeyStatementsSurviveDeallocateAll: a caller's transaction on a held lock's
// connection may run DEALLOCATE ALL. The library's statements are then prepared again at
// their next use: the Unlock releases the lock and the connection goes on taking locks,
// where a statement lost to the server would otherwise fail every later call on it.
func TestKeyStatementsSurviveDeallocateAll(t *testing.T) {
	ctx := ctxT(t)
	m := newManager(t, []string{"pool_max_conns=1"})
	key := advisory.KeyOf(t.Name())
	for _, how := range []string{"SQL", "pgx"} {
		t.Run(how, func(t *testing.T) {
			l, err := m.LockKey(ctx, key)
			require.NoError(t, err)
			pid := l.PID()
			require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
				if how == "pgx" {
					return tx.Conn().DeallocateAll(ctx)
				}
				_, err := tx.Exec(ctx, "DEALLOCATE ALL")
				return err
			}))
			require.Empty(t, lockStatements(preparedOn(t, l)), "DEALLOCATE ALL ran")
			requireHeldBy(t, key, pid)
			require.NoError(t, l.Unlock(ctx))
			requireFree(t, key)

			l, err = m.LockKey(ctx, key)
			require.NoError(t, err)
			require.Equal(t, pid, l.PID(), "the connection was kept")
			requireHeldBy(t, key, pid)
			require.NoError(t, l.Unlock(ctx))
			requireFree(t, key)
		})
	}
}

// queryRecorder records the text of every query pgx traces.
type queryRecorder struct {
	mu   sync.Mutex
	seen []string
}

func (c *queryRecorder) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.seen = append(c.seen, d.SQL)
	return ctx
}

func (c *queryRecorder) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

func (c *queryRecorder) count(part string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, sql := range c.seen {
		if strings.Contains(sql, part) {
			n++
		}
	}
	return n
}

// TestTracedConnectionsRunEveryStatementThroughPgx: a caller who configured a
// QueryTracer sees every lock statement (the own path stays off), and pgx's statement
// cache prepares them as before.
func TestTracedConnectionsRunEveryStatementThroughPgx(t *testing.T) {
	ctx := ctxT(t)
	cfg, err := pgxpool.ParseConfig(dsn(t, "pool_max_conns=1"))
	require.NoError(t, err)
	tr := &queryRecorder{}
	cfg.ConnConfig.Tracer = tr
	m, err := advisory.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	key := advisory.KeyOf(t.Name())
	for range 3 {
		l, err := m.LockKey(ctx, key)
		require.NoError(t, err)
		requireHeldBy(t, key, l.PID())
		require.NoError(t, l.Unlock(ctx))
	}
	require.Equal(t, 3, tr.count("pg_catalog.pg_advisory_lock($1)"))
	require.Equal(t, 3, tr.count("pg_catalog.pg_advisory_unlock($1)"))
	l, err := m.LockKey(ctx, key)
	require.NoError(t, err)
	got := lockStatements(preparedOn(t, l))
	require.NoError(t, l.Unlock(ctx))
	for name := range got {
		require.False(t, strings.HasPrefix(name, "advisory_"), "the own path ran: %v", got)
	}
	require.Len(t, got, 2, "pgx's cache prepared the lock and unlock statements: %v", got)
}

// tryStatements returns the names of prepared's statements whose text is the key's try
// lock statement.
func tryStatements(prepared map[string]string) []string {
	var out []string
	for name, text := range prepared {
		if strings.Contains(text, "pg_catalog.pg_try_advisory_lock($1)") {
			out = append(out, name)
		}
	}
	return out
}

// TestNamedLocksTryByTheKeysOwnStatement: a named lock that a connection has not
// prepared is tried by key first (pin_named.go), with the statement TryLockKey runs, so a
// connection that takes both holds that text prepared once. After a caller's DEALLOCATE
// ALL the next named lock prepares it again and takes the lock, where it failed as
// ErrPooler before.
func TestNamedLocksTryByTheKeysOwnStatement(t *testing.T) {
	ctx := ctxT(t)
	m := newManager(t, []string{"pool_max_conns=1"})
	name := func(i int) string { return fmt.Sprintf("%s/%d", t.Name(), i) }

	k, err := m.TryLockKey(ctx, advisory.KeyOf(name(0)))
	require.NoError(t, err)
	pid := k.PID()
	require.NoError(t, k.Unlock(ctx))
	l, err := m.Lock(ctx, name(1))
	require.NoError(t, err)
	require.Equal(t, pid, l.PID(), "one connection: the pool holds one")
	requireHeldBy(t, advisory.KeyOf(name(1)), pid)
	require.Equal(t, []string{"advisory_try_lock"}, tryStatements(preparedOn(t, l)),
		"the named lock's try by key is TryLockKey's statement, prepared once")

	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "DEALLOCATE ALL")
		return err
	}))
	require.NoError(t, l.Unlock(ctx))
	requireFree(t, advisory.KeyOf(name(1)))

	for i := 2; i < 4; i++ { // each name new to the connection: tried by key first
		l, err = m.Lock(ctx, name(i))
		require.NoError(t, err, "the deallocated try statement is prepared again")
		require.Equal(t, pid, l.PID(), "the connection was kept")
		requireHeldBy(t, advisory.KeyOf(name(i)), pid)
		require.Equal(t, []string{"advisory_try_lock"}, tryStatements(preparedOn(t, l)))
		require.NoError(t, l.Unlock(ctx))
		requireFree(t, advisory.KeyOf(name(i)))
	}
}
