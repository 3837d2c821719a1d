package pgtest_test

import (
	"context"
	"hash/fnv"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestPgBouncerModes: the helper runs a real PgBouncer in each pool mode, and it behaves
// as that mode does: in transaction and statement mode two idle clients are served by the
// same server connection (the same pg_backend_pid()), in session mode each client has its
// own. pgx's extra_float_digits and application_name get through.
func TestPgBouncerModes(t *testing.T) {
	srv := server(t)
	for _, mode := range []pgtest.PoolMode{pgtest.PoolSession, pgtest.PoolTransaction, pgtest.PoolStatement} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			b := pgtest.PgBouncerForTest(t, srv, mode)
			require.Equal(t, mode, b.Mode())
			a := connect(t, pgtest.WithParams(b.DSN(), map[string]string{
				"application_name": "pgtest-a", "extra_float_digits": "3"}))
			c := connect(t, b.DSN())
			pidA, pidC := backendPID(t, a), backendPID(t, c)
			assert.NotEqual(t, a.PgConn().PID(), pidA, "the start-up's BackendKeyData is PgBouncer's, not the backend's")
			if mode == pgtest.PoolSession {
				assert.NotEqual(t, pidA, pidC, "session mode: a server connection per client")
				var app string
				require.NoError(t, a.QueryRow(ctx, "SHOW application_name").Scan(&app))
				assert.Equal(t, "pgtest-a", app)
			} else {
				assert.Equal(t, pidA, pidC, "%s mode: idle clients share the idle server connection", mode)
			}
			pids, err := b.ServerPIDs(ctx)
			require.NoError(t, err)
			assert.Contains(t, pids, pidA, "SHOW SERVERS lists the backend")
			if mode != pgtest.PoolSession {
				assert.LessOrEqual(t, len(pids), pgtest.PgBouncerPoolSize)
			}
		})
	}
}

// TestPgBouncerKilledClientsLock: a client process holding a session advisory lock through
// PgBouncer is SIGKILLed. In session mode PgBouncer's reset query (DISCARD ALL) frees the
// lock within 2 s; in transaction mode nothing does: the lock stays on the server
// connection after PgBouncer has dropped the client (the stranded-lock hazard).
func TestPgBouncerKilledClientsLock(t *testing.T) {
	srv := server(t)
	for _, mode := range []pgtest.PoolMode{pgtest.PoolSession, pgtest.PoolTransaction} {
		t.Run(string(mode), func(t *testing.T) {
			t.Parallel()
			ctx := ctxT(t)
			b := pgtest.PgBouncerForTest(t, srv, mode)
			direct := directPool(t, srv)
			key := keyOf(t.Name())
			holder := startHolder(t, b.DSN(), key)
			require.Len(t, holders(t, direct, key), 1)
			start := time.Now()
			require.NoError(t, syscall.Kill(holder.Process.Pid, syscall.SIGKILL))
			if mode == pgtest.PoolSession {
				require.True(t, within(2*time.Second, 10*time.Millisecond, func() bool { return len(holders(t, direct, key)) == 0 }),
					"lock still held 2s after its client was killed")
				t.Logf("session mode: lock freed %v after SIGKILL", time.Since(start))
				return
			}
			require.True(t, within(10*time.Second, 10*time.Millisecond, func() bool {
				clients, err := b.Show(ctx, "CLIENTS")
				require.NoError(t, err)
				// The console is a client too.
				return !slices.ContainsFunc(clients, func(c map[string]string) bool { return c["database"] != "pgbouncer" })
			}), "PgBouncer did not drop the killed client")
			pids, err := b.ServerPIDs(ctx)
			require.NoError(t, err)
			held := holders(t, direct, key)
			require.Len(t, held, 1, "transaction mode: the lock outlives its client")
			assert.True(t, slices.Contains(pids, held[0]), "held by PgBouncer's server connection %v", pids)
		})
	}
}

func backendPID(t testing.TB, conn *pgx.Conn) uint32 {
	t.Helper()
	var pid uint32
	require.NoError(t, conn.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&pid))
	return pid
}

// holders returns the pids holding the advisory lock key (bigint form).
func holders(t testing.TB, conn *pgxpool.Pool, key int64) []uint32 {
	t.Helper()
	rows, err := conn.Query(context.Background(), `SELECT pid FROM pg_locks WHERE locktype = 'advisory'
		AND granted AND objsubid = 1 AND classid = $1 AND objid = $2`, uint32(uint64(key)>>32), uint32(key))
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
	require.NoError(t, err)
	return pids
}

// directPool is a pool of direct connections to srv, for observing pg_locks.
func directPool(t testing.TB, srv *pgtest.Server) *pgxpool.Pool {
	t.Helper()
	p, err := pgxpool.New(context.Background(), srv.DSN())
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return p
}

func keyOf(name string) int64 {
	h := fnv.New64a()
	h.Write([]byte(name))
	return int64(h.Sum64())
}

// within calls cond on the test's goroutine every tick until it returns true (within
// reports true) or limit has passed (false).
func within(limit, tick time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(tick)
	}
	return true
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestPgBouncerConnectQuery: WithConnectQuery's SQL (quotes included) runs on each new
// server connection, so clients see its settings.
func TestPgBouncerConnectQuery(t *testing.T) {
	t.Parallel()
	b := pgtest.PgBouncerForTest(t, server(t), pgtest.PoolTransaction,
		pgtest.WithConnectQuery("SET lock_timeout = '17s'; SET statement_timeout = '19s'"))
	var lockTimeout, statementTimeout string
	require.NoError(t, connect(t, b.DSN()).QueryRow(ctxT(t),
		"SELECT current_setting('lock_timeout'), current_setting('statement_timeout')").Scan(&lockTimeout, &statementTimeout))
	assert.Equal(t, "17s", lockTimeout)
	assert.Equal(t, "19s", statementTimeout)
}

// TestPgBouncerOnATakenPortTriesAnother: a free port taken by another PgBouncer before
// this one binds it. The other one answers the readiness query; this one must not be
// taken as ready, but start again on another port, and answer there on its own.
func TestPgBouncerOnATakenPortTriesAnother(t *testing.T) {
	other := pgtest.PgBouncerForTest(t, server(t), pgtest.PoolTransaction)
	pgtest.FirstPortForTest(other.Port())
	b := pgtest.PgBouncerForTest(t, server(t), pgtest.PoolTransaction)
	require.NotEqual(t, other.Port(), b.Port(), "started on the port another PgBouncer had")
	require.NoError(t, other.Close())
	var one int
	require.NoError(t, connect(t, b.DSN()).QueryRow(ctxT(t), "SELECT 1").Scan(&one))
}
