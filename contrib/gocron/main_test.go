package advgocron_test

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The module's tests get their PostgreSQL from the root module's harness (internal/pgtest:
// ADVISORY_TEST_DSN, else testcontainers, else a throwaway local cluster). Go allows the
// import: this module's path lies under the root module's, as internal/'s rule asks.
var (
	srv      *pgtest.Server
	startErr error
	admin    *pgxpool.Pool
)

func TestMain(m *testing.M) {
	if os.Getenv(envReplica) != "" { // re-executed by TestReplicas as one replica
		os.Exit(replicaMain())
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	return pgtest.Suite{Srv: &srv, Err: &startErr, Admin: &admin}.Run(m)
}

// dsn returns the test server's connection string, or skips (fails under CI=true).
func dsn(t testing.TB) string {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	return srv.DSN()
}

// newManager returns a Manager on the test server, closed when the test ends.
func newManager(t testing.TB) *advisory.Manager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := advisory.New(ctx, dsn(t))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// holders returns the backend pids holding the advisory lock name.
func holders(t testing.TB, name string) []uint32 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	pids, err := pgtest.Holders(ctx, srv.DSN(), int64(advisory.KeyOf(name)))
	require.NoError(t, err)
	return pids
}

// eventually fails t unless cond holds within limit; cond runs on the test's goroutine.
func eventually(t testing.TB, limit time.Duration, cond func() bool, what string) {
	t.Helper()
	for deadline := time.Now().Add(limit); !cond(); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", limit, what)
		}
	}
}

func terminate(t testing.TB, pid uint32) {
	t.Helper()
	var ok bool
	require.NoError(t, admin.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&ok))
	require.True(t, ok, "pg_terminate_backend(%d)", pid)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}
