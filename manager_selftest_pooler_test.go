package advisory_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/advisorytest"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// skippedCheck is what New says at Warn when its transaction self-test could not run.
const skippedCheck = "could not check that the server enforces advisory locks"

// TestNewThroughAPoolOfOne (issue 46, item 5): through PgBouncer with default_pool_size
// = 1 the transaction self-test's second session can never get a server session while
// the first's transaction keeps the only one. New used to wait the second session's
// whole bound (5 s) every time, silently. Now the first session sees on the server that
// the pooler opens no session for the second, gives up after 1 s of that, and says at
// Warn that the check was skipped: New returns well within the old bound. With a pool
// of two the check runs, and still refuses an engine that does not enforce advisory
// locks (ErrUnsupportedServer); through a pool of one that cannot be checked, and New
// says so.
func TestNewThroughAPoolOfOne(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	one := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(1))
	two := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(2))

	t.Run("pool of one: New does not wait out the bound, and says why", func(t *testing.T) {
		for i := range 3 {
			warns, logger := warnings()
			start := time.Now()
			m, err := advisory.New(ctxT(t), one.DSN(), advisory.WithLogger(logger))
			took := time.Since(start)
			require.NoError(t, err, "New %d", i)
			require.Equal(t, advisory.HoldingTransaction, m.Holding())
			l, err := m.Lock(ctxT(t), t.Name())
			require.NoError(t, err)
			require.NoError(t, l.Unlock(ctxT(t)))
			m.Close()
			require.Len(t, warns(skippedCheck), 1, "New %d said why it skipped the check", i)
			assert.Less(t, took, 4*time.Second, "New %d: well within the second session's 5 s bound", i)
			t.Logf("New %d through a pool of one: %v", i, took)
		}
	})
	t.Run("pool of two: the check runs", func(t *testing.T) {
		warns, logger := warnings()
		m, err := advisory.New(ctxT(t), two.DSN(), advisory.WithLogger(logger))
		require.NoError(t, err)
		m.Close()
		require.Empty(t, warns(skippedCheck))
	})
	t.Run("an engine that fakes locks", func(t *testing.T) {
		db := fakeEngine(t)
		_, err := advisory.New(ctxT(t), two.DSN()+" dbname="+db)
		require.ErrorIs(t, err, advisory.ErrUnsupportedServer, "refused through a pool of two")
		warns, logger := warnings()
		m, err := advisory.New(ctxT(t), one.DSN()+" dbname="+db, advisory.WithLogger(logger))
		require.NoError(t, err, "through a pool of one the check cannot run")
		m.Close()
		require.Len(t, warns(skippedCheck), 1, "and New says so")
	})
}

// fakeEngine makes a database of its own whose pg_try_advisory_lock and
// pg_advisory_unlock grant every call, as an engine whose advisory locks are stubs, and
// returns its name.
func fakeEngine(t *testing.T) string {
	dsn := advisorytest.DSN(t)
	owner, err := pgx.Connect(ctxT(t), dsn)
	require.NoError(t, err)
	defer owner.Close(context.Background())
	_, err = owner.Exec(ctxT(t), `
		CREATE OR REPLACE FUNCTION pg_catalog.pg_try_advisory_lock(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true';
		CREATE OR REPLACE FUNCTION pg_catalog.pg_advisory_unlock(bigint) RETURNS boolean LANGUAGE sql AS 'SELECT true'`)
	require.NoError(t, err)
	cfg, err := pgconn.ParseConfig(dsn)
	require.NoError(t, err)
	return cfg.Database
}

// warnings returns a logger, and a function that returns the messages it logged at Warn
// that contain a text.
func warnings() (func(string) []string, *slog.Logger) {
	var mu sync.Mutex
	var said []string
	logger := slog.New(handlerFunc(func(r slog.Record) {
		if r.Level == slog.LevelWarn {
			mu.Lock()
			said = append(said, r.Message)
			mu.Unlock()
		}
	}))
	return func(text string) []string {
		mu.Lock()
		defer mu.Unlock()
		var out []string
		for _, m := range said {
			if strings.Contains(m, text) {
				out = append(out, m)
			}
		}
		return out
	}, logger
}
