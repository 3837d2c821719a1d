package migrations_test

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The module's tests get their PostgreSQL from the root module's harness (internal/pgtest:
// ADVISORY_TEST_DSN, else testcontainers, else a throwaway local cluster). Go allows the
// import: this module's path lies under the root module's, as internal/'s rule asks.
var (
	srv      *pgtest.Server
	startErr error
	toolDir  string // where the tests build the CLIs; removed at the end
)

func TestMain(m *testing.M) {
	if os.Getenv(envHolder) != "" { // re-executed by TestMigrateLibraryUnderDo as one holder
		os.Exit(holderMain())
	}
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	var err error
	if toolDir, err = os.MkdirTemp("", "e2e-tools-"); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: %v\n", err)
		return 1
	}
	defer os.RemoveAll(toolDir)
	return pgtest.Suite{Srv: &srv, Err: &startErr}.Run(m)
}

// server skips the test when there is no PostgreSQL (fails under CI=true).
func server(t testing.TB) *pgtest.Server {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	return srv
}

// freshDB creates an empty database for one test (or one round) and returns its URL
// (postgres://..., the form every tool here accepts). It is dropped when the test ends,
// after terminating whatever is still connected to it.
func freshDB(t *testing.T, name string) string {
	t.Helper()
	s := server(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	admin := adminConn(t, ctx)
	_, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	require.NoError(t, err)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		conn, err := pgx.Connect(ctx, s.DSN())
		if err != nil {
			t.Errorf("drop database %s: %v", name, err)
			return
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
			t.Errorf("drop database %s: %v", name, err)
		}
	})
	return dbURL(t, name)
}

// adminConn is a connection to the server's own database, closed when the test ends.
func adminConn(t testing.TB, ctx context.Context) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, server(t).DSN())
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// dbURL is the URL of database db on the test server, as the superuser, with no
// application_name or options of its own (so that PGAPPNAME and PGOPTIONS apply).
func dbURL(t testing.TB, db string) string {
	t.Helper()
	cfg, err := pgconn.ParseConfig(server(t).DSN())
	require.NoError(t, err)
	sslmode := "disable"
	if cfg.TLSConfig != nil {
		sslmode = "require"
	}
	u := url.URL{Scheme: "postgres", Host: fmt.Sprintf("%s:%d", cfg.Host, cfg.Port), Path: "/" + db,
		RawQuery: "sslmode=" + sslmode}
	if cfg.Password != "" {
		u.User = url.UserPassword(cfg.User, cfg.Password)
	} else {
		u.User = url.User(cfg.User)
	}
	return u.String()
}

func connect(t testing.TB, ctx context.Context, dsn string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}
