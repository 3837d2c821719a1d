package advisory_test

// Checks and load shared by the real-PgBouncer tests (pooler_real_test.go,
// pooler_real_session_test.go): they look at the server directly, never through PgBouncer.

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// busyClients keeps n plain clients (simple protocol, as PgBouncer's users must) running
// short statements through dsn until the test ends, so that PgBouncer's few server
// connections are contended and a client's statements move between them.
func busyClients(t *testing.T, dsn string, n int) {
	if n == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	var wg sync.WaitGroup
	var stmts atomic.Int64
	for i := 0; i < n; i++ {
		conn, err := pgx.Connect(ctx, pgtest.WithPairs(dsn, "default_query_exec_mode=simple_protocol"))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close(context.Background())
			for i := 0; i < 1_000_000 && ctx.Err() == nil; i++ {
				if _, err := conn.Exec(ctx, "SELECT pg_sleep(0.002)"); err == nil {
					stmts.Add(1)
				}
			}
		}()
	}
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		t.Logf("%d background clients ran %d statements", n, stmts.Load())
	})
	require.True(t, within(10*time.Second, time.Millisecond, func() bool { return stmts.Load() >= int64(5*n) }),
		"background clients are not running")
}

// requireNoLockLeft: once every client has closed, no advisory lock is held or awaited
// by any of PgBouncer's server connections (their pids from SHOW SERVERS, pg_locks seen
// directly), after a settle of at most 2 s.
func requireNoLockLeft(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	var left []string
	if !within(2*time.Second, 20*time.Millisecond, func() bool {
		pids, err := b.ServerPIDs(ctx)
		require.NoError(t, err)
		left = advisoryLocksOf(t, pids)
		return len(left) == 0
	}) {
		t.Errorf("advisory locks left on PgBouncer's server connections 2s after the clients closed: %s",
			strings.Join(left, "; "))
	}
}

func advisoryLocksOf(t testing.TB, pids []uint32) []string {
	rows, err := admin.Query(context.Background(), `SELECT format('pid %s %s key %s', pid,
		CASE WHEN granted THEN 'holds' ELSE 'waits for' END, (classid::bigint << 32) | objid::bigint)
		FROM pg_locks WHERE locktype = 'advisory' AND pid = ANY($1) ORDER BY pid`, pids)
	require.NoError(t, err)
	left, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return left
}

// sessionSettings are the settings the library SETs on its connections (keepalive.go's
// serverSettings); those of PostgreSQL 14+ are added by settingsToCheck.
var sessionSettings = []string{"tcp_keepalives_idle", "tcp_keepalives_interval", "tcp_keepalives_count",
	"tcp_user_timeout", "lock_timeout", "statement_timeout", "idle_in_transaction_session_timeout"}

func settingsToCheck(t testing.TB) []string {
	var version int
	require.NoError(t, admin.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int").Scan(&version))
	out := sessionSettings
	if version >= 140000 {
		out = append(out, "client_connection_check_interval", "idle_session_timeout")
	}
	if version >= 170000 {
		out = append(out, "transaction_timeout") // a transaction holding's (see txSettings)
	}
	return out
}

// requireNoSettingLeaked: after the library's clients ran, plain clients through PgBouncer
// see the server's defaults, and no lock connection's ownership token, (but for those overridden, which PgBouncer's connect_query
// sets) on every server connection PgBouncer could hand to a new client (all of them in transaction and statement mode; in session mode those not
// linked to a client). Settings are per backend and cannot be read from another session,
// so plain clients sample the server connections, one client per connection to check,
// each statement holding its connection for 50 ms, until every one has answered, within 5 s.
func requireNoSettingLeaked(t *testing.T, b *pgtest.PgBouncer, overridden map[string]string) {
	ctx := ctxT(t)
	names := settingsToCheck(t)
	// And the ownership token a lock connection's set-up stores (see manager_setup.go), which a
	// server connection shared by clients must not keep (no default: "" when unset).
	settings := "ARRAY[current_setting('" + strings.Join(names, "'), current_setting('") + "'), " +
		"coalesce(current_setting('advisory.owner', true), '')]"
	names = append(names[:len(names):len(names)], "advisory.owner")
	var want []string // the defaults, on a direct connection
	require.NoError(t, admin.QueryRow(ctx, "SELECT "+settings).Scan(&want))
	for i, name := range names {
		if v, ok := overridden[name]; ok {
			want[i] = v
		}
	}
	query := "SELECT pg_backend_pid(), " + settings + " FROM pg_sleep(0.05)"
	// A server connection to look at, at least: in statement mode the library's probe
	// makes PgBouncer close the one its refused transaction ran on.
	plain, err := pgx.Connect(ctx, pgtest.WithPairs(b.DSN(), "default_query_exec_mode=simple_protocol"))
	require.NoError(t, err)
	_, err = plain.Exec(ctx, "SELECT 1")
	require.NoError(t, err)
	require.NoError(t, plain.Close(ctx))
	pids := reusableServerPIDs(t, b)
	require.NotEmpty(t, pids, "no server connection to check")
	seen := sampleServerConns(t, b.DSN(), query, pids)
	for pid, got := range seen {
		for i, name := range names {
			assert.Equal(t, want[i], got[i], "%s on PgBouncer's server connection pid %d (default there: %s)", name, pid, want[i])
		}
	}
	for _, pid := range pids {
		assert.Contains(t, seen, pid, "server connection pid %d never sampled in 5s", pid)
	}
}

// reusableServerPIDs lists the server connections a new client may be given.
func reusableServerPIDs(t *testing.T, b *pgtest.PgBouncer) []uint32 {
	servers, err := b.Show(ctxT(t), "SERVERS")
	require.NoError(t, err)
	var pids []uint32
	for _, s := range servers {
		if b.Mode() == pgtest.PoolSession && s["state"] == "active" {
			continue // linked to a client for its whole session
		}
		pid, err := strconv.ParseUint(s["remote_pid"], 10, 32)
		require.NoError(t, err)
		if pid == 0 {
			continue // still logging in (no BackendKeyData yet): it has run nothing of anyone's
		}
		pids = append(pids, uint32(pid))
	}
	return pids
}

// sampleServerConns runs query (pid, settings) on len(want) plain clients of dsn at once,
// each repeatedly, until every pid of want has answered or 5 s have passed.
func sampleServerConns(t *testing.T, dsn, query string, want []uint32) map[uint32][]string {
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	var mu sync.Mutex
	seen := make(map[uint32][]string)
	done := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, pid := range want {
			if _, ok := seen[pid]; !ok {
				return false
			}
		}
		return true
	}
	var wg sync.WaitGroup
	for range want {
		conn, err := pgx.Connect(ctx, pgtest.WithPairs(dsn, "default_query_exec_mode=simple_protocol"))
		require.NoError(t, err)
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer conn.Close(context.Background())
			for round := 0; round < 100 && ctx.Err() == nil && !done(); round++ {
				var pid uint32
				var settings []string
				if conn.QueryRow(ctx, query).Scan(&pid, &settings) == nil {
					mu.Lock()
					seen[pid] = settings
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	return seen
}
