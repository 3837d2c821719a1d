// Package advisorytest gives your tests a real, throwaway PostgreSQL in one line, as
// net/http/httptest gives them a real HTTP server:
//
//	func TestMigrations(t *testing.T) {
//		t.Parallel()
//		dsn := advisorytest.DSN(t) // a fresh database of its own, dropped when the test ends
//		m, err := advisory.New(t.Context(), dsn)
//		if err != nil {
//			t.Fatal(err)
//		}
//		defer m.Close()
//		// ... m.Lock, m.Do, your code under test ...
//	}
//
// There is no in-memory fake: advisory locks are the server's, and so is their behaviour
// (waits, cancellation, loss when a backend dies), so tests meet the real server.
//
// # One server, one database per test
//
// The first call to [DSN] in a test binary starts (or finds) a server, once; every later
// call shares it. Each call creates a database of its own (CREATE DATABASE) and drops it
// when the test ends (t.Cleanup, after terminating the sessions still connected to it).
// Advisory locks belong to a database, so parallel tests never see each other's locks,
// whatever keys they use. No TestMain is needed.
//
// # Where the server comes from
//
// [DSN] tries, in order:
//
//  1. the connection string in the environment variable ADVISORY_TEST_DSN ([EnvDSN]), in
//     URL or keyword/value form: an existing server, which must let that role create
//     databases (CREATEDB); nothing is started;
//  2. testcontainers-go's postgres module (image postgres:16-alpine) when a Docker engine
//     answers, run in a helper process that the go command builds from the module
//     internal/pgtest/tc of the library's source tree (a clone your module points at), so
//     that testcontainers-go stays out of your module's go.sum; the helper terminates the
//     container when the test binary exits (testcontainers' reaper, if the helper is
//     killed);
//  3. a throwaway cluster from the local PostgreSQL server binaries (initdb and postgres
//     from PATH, else the newest /usr/lib/postgresql/N/bin, or the directory named by
//     ADVISORY_TEST_PGBIN), in a temporary directory, on a free loopback port, with
//     fsync off, run as the postgres OS user when the tests run as root.
//
// When none works, the test is skipped with the reasons, except with CI=true in the
// environment, where that fails it: a CI run must not pass by testing nothing.
//
// # Nothing left behind
//
// A local cluster is tied to the test binary, which needs no TestMain and no Close: when
// the binary exits, normally or not (a panic, a timeout, SIGKILL), the postmaster gets a
// parent-death signal and a small watchdog shell removes the cluster's directory. A
// database made on an ADVISORY_TEST_DSN server is dropped by its test's cleanup, which a
// killed test binary does not run: its name starts with "advisorytest_".
package advisorytest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// EnvDSN names the environment variable that points DSN at an existing server.
const EnvDSN = pgtest.EnvDSN

// shared is the test binary's server, started by the first DSN call. It is package state
// on purpose: one server per test binary, found or started once, without a TestMain.
var shared struct {
	once sync.Once
	srv  *pgtest.Server
	err  error
}

// server returns the shared server, starting it on first use (at most 5 minutes: a first
// container pull is slow).
func server() (*pgtest.Server, error) {
	shared.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		shared.srv, shared.err = pgtest.Start(ctx)
	})
	return shared.srv, shared.err
}

// DSN returns a connection string for a new, empty database that belongs to t alone, on
// the test binary's shared server (see the package doc for where it comes from). It
// blocks while the server starts (first call only) and while the database is created; it
// is safe to call from parallel tests. The database is dropped when t ends, after its
// remaining sessions are terminated.
//
// The role is a superuser on a server started here; on an ADVISORY_TEST_DSN server it is
// that string's role. When no server can be had, t is skipped with the reasons (failed
// under CI=true); when the database cannot be created, t fails.
func DSN(t testing.TB) string {
	t.Helper()
	srv, err := server()
	pgtest.Need(t, srv, err)
	name := "advisorytest_" + randomHex()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := createDatabase(ctx, srv.DSN(), name); err != nil {
		t.Fatalf("advisorytest: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := dropDatabase(ctx, srv.DSN(), name); err != nil {
			t.Errorf("advisorytest: %v", err)
		}
	})
	return pgtest.WithParams(srv.DSN(), map[string]string{"dbname": name})
}

// randomHex is 16 random hex digits: database names unique across the test binaries of
// `go test ./...`, which may share one ADVISORY_TEST_DSN server.
func randomHex() string {
	b := make([]byte, 8)
	rand.Read(b)
	return hex.EncodeToString(b)
}
