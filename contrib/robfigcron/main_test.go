package advrobfigcron_test

import (
	"context"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The module's tests get their PostgreSQL from the root module's harness (internal/pgtest:
// ADVISORY_TEST_DSN, else testcontainers, else a throwaway local cluster). Go allows the
// import: this module's path lies under the root module's, as internal/'s rule asks. The
// Example reads DATABASE_URL, set here to the server's when it is not set.
var (
	srv      *pgtest.Server
	startErr error
	admin    *pgxpool.Pool
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	return pgtest.Suite{Srv: &srv, Err: &startErr, Admin: &admin, Setup: setup}.Run(m)
}

// setup points the examples at the server (DATABASE_URL, unless set).
func setup(_ context.Context, s *pgtest.Server) (func(), error) {
	if os.Getenv("DATABASE_URL") == "" {
		os.Setenv("DATABASE_URL", s.DSN())
	}
	return nil, nil
}

// newManager returns a Manager on the test server, closed when the test ends.
func newManager(t testing.TB) *advisory.Manager {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := advisory.New(ctx, srv.DSN())
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

// eventually fails t unless cond holds within limit.
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

// lockName is a lock name unique to the test.
func lockName(t testing.TB) string { return "advrobfigcron/" + t.Name() }

// recLogger is a cron.Logger that records what the wrapper reports.
type recLogger struct {
	mu     sync.Mutex
	infos  []string
	errors []error
}

func (l *recLogger) Info(msg string, kv ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.infos = append(l.infos, msg)
}

func (l *recLogger) Error(err error, msg string, kv ...interface{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.errors = append(l.errors, err)
}

// skips counts the skips logged so far.
func (l *recLogger) skips() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, m := range l.infos {
		if strings.HasPrefix(m, "skip") {
			n++
		}
	}
	return n
}

func (l *recLogger) errs() []error {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]error(nil), l.errors...)
}
