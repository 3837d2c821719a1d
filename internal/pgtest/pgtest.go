// Package pgtest gives tests a throwaway PostgreSQL, and the real programs that stand in
// front of or beside one: PgBouncer and a hot standby. The local cluster is package
// pglocal, which the pgadvisory demo uses without this package, so that the binary links
// no testcontainers or Docker client code.
//
// [Start] tries, in order:
//
//  1. the DSN in the environment variable ADVISORY_TEST_DSN (an existing server; nothing is
//     started), in keyword/value or URL form;
//  2. testcontainers-go's postgres module, when a Docker engine answers (GET /_ping on
//     DOCKER_HOST or the usual sockets); it runs in a helper process, the command of the
//     module internal/pgtest/tc, built with the go command from this source tree, so that
//     testcontainers-go and the Docker client stay out of the library's go.mod and out of
//     the go.sum of every module that imports the library;
//  3. a throwaway cluster built with the local PostgreSQL binaries (initdb + postgres), run as the
//     postgres OS user when the caller is root, in a temporary directory on a free loopback port,
//     with fsync off.
//
// A Server started by this package listens on TCP loopback so that keepalive settings apply.
//
// # Which binaries
//
// When ADVISORY_TEST_PGBIN names a directory of server binaries, Start skips
// testcontainers and the local cluster (and [StartStandby]) use that directory: it must
// hold initdb and postgres (and pg_basebackup for a standby), for example the bin directory
// that scripts/pg-version.sh unpacks for one PostgreSQL major. When it is set and lacks
// them, Start fails rather than test another version. Unset, the binaries come from PATH,
// else the newest /usr/lib/postgresql/N/bin. ADVISORY_TEST_DSN still comes first.
//
// # Poolers and standbys
//
// [StartPgBouncer] runs Debian's pgbouncer in front of a Server in a given pool mode;
// [StartStandby] makes a streaming hot standby of a Server with pg_basebackup;
// [StartSyncPair] makes a primary and a synchronous standby that trade places on each
// failover (crash, promote, rebuild). They fail with an error wrapping [ErrUnavailable]
// when the program is not installed; the [PgBouncerForTest], [StandbyForTest] and
// [SyncPairForTest] helpers turn that into a skip, or a failure under CI=true.
//
// # Partitions around a pooler
//
// [NewPoolerNet] makes a client namespace, a pooler namespace and two links (client to
// pooler, pooler to server) that can be cut apart with real packet drops; a PgBouncer
// started [WithPoolerNet] runs in it, and [PgBouncer.Stop] and [PgBouncer.Start] kill and
// restart it on its port. [NoCancel] keeps a measuring client from sending the cancel
// requests that can crash PgBouncer 1.18.
package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// EnvDSN names the environment variable that points the harness at an existing server.
const EnvDSN = "ADVISORY_TEST_DSN"

// EnvPGBin names the environment variable that points the local cluster at a directory of
// PostgreSQL server binaries (see the package doc).
const EnvPGBin = pglocal.EnvPGBin

// ErrUnavailable means a program the harness needs (pgbouncer, pg_basebackup) is not
// installed here.
var ErrUnavailable = errors.New("pgtest: not available here")

// Server is a PostgreSQL server for tests. It is safe for concurrent use, except that
// Restart and Close must not run concurrently with each other.
type Server struct {
	dsn     string
	kind    string
	port    int
	restart func(ctx context.Context) error
	crash   func(ctx context.Context) error
	stop    func() error
}

// DSN returns a connection string for the server's superuser over TCP.
func (s *Server) DSN() string { return s.dsn }

// Kind says where the server came from: "env", "testcontainers" or "local".
func (s *Server) Kind() string { return s.kind }

// ErrNoRestart is returned by Restart for a server the harness did not start.
var ErrNoRestart = errors.New("pgtest: this server cannot be restarted by the harness")

// Restart stops the server (fast shutdown: sessions are terminated) and starts it again on
// the same address. It blocks until the server accepts connections again or ctx ends.
func (s *Server) Restart(ctx context.Context) error {
	if s.restart == nil {
		return ErrNoRestart
	}
	return s.restart(ctx)
}

// Crash stops the server with an immediate shutdown (no checkpoint, WAL buffers lost) and
// starts it again (crash recovery):
// see pglocal.Cluster.Crash. Only a server from local binaries can; others return
// ErrNoRestart.
func (s *Server) Crash(ctx context.Context) error {
	if s.crash == nil {
		return ErrNoRestart
	}
	return s.crash(ctx)
}

// Close stops the server and removes its files. It is a no-op for a server from EnvDSN.
func (s *Server) Close() error {
	if s.stop == nil {
		return nil
	}
	return s.stop()
}

// Options ask for more than a loopback server. Only a server built from local binaries
// honours them; [StartLocal] starts one.
type Options struct {
	// ListenAddresses are addresses to listen on besides 127.0.0.1 (they must exist).
	ListenAddresses []string
	// TrustCIDRs are client networks admitted without a password (pg_hba.conf).
	TrustCIDRs []string
	// Settings are server settings, "name=value" each, over the harness's own.
	Settings []string
}

// Start returns a running server from the first source that works (see the package doc).
// It blocks until the server accepts connections or ctx ends. The error lists why each
// source failed.
func Start(ctx context.Context) (*Server, error) {
	if dsn := strings.TrimSpace(os.Getenv(EnvDSN)); dsn != "" {
		return &Server{dsn: dsn, kind: "env"}, nil
	}
	var reasons []string
	if strings.TrimSpace(os.Getenv(EnvPGBin)) == "" { // a version run wants those binaries, not a container
		srv, err := startContainer(ctx)
		if err == nil {
			return srv, nil
		}
		reasons = append(reasons, "testcontainers: "+err.Error())
	}
	srv, err := startLocal(ctx, Options{})
	if err == nil {
		return srv, nil
	}
	reasons = append(reasons, "local binaries: "+err.Error())
	return nil, fmt.Errorf("pgtest: no PostgreSQL server (set %s, run a Docker engine, or install the "+
		"PostgreSQL server package):\n  %s", EnvDSN, strings.Join(reasons, "\n  "))
}

// InCI reports whether the CI environment variable asks for a server to be mandatory.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1" || v == "yes"
}

// StartLocal starts a throwaway cluster from the local binaries with opts.
func StartLocal(ctx context.Context, opts Options) (*Server, error) {
	return startLocal(ctx, opts)
}

// Port returns the TCP port of a server started from local binaries, else 0.
func (s *Server) Port() int { return s.port }

// TB is the part of testing.TB that Need uses (this package does not import testing, so
// that programs such as bench can use the harness).
type TB interface {
	Helper()
	Fatalf(format string, args ...any)
	Skipf(format string, args ...any)
}

// Need stops a test that needs a server when there is none: it is skipped with the
// reason, or fails under CI=true. srv and startErr are what Start returned.
func Need(t TB, srv *Server, startErr error) {
	t.Helper()
	if srv != nil {
		return
	}
	if InCI() {
		t.Fatalf("no PostgreSQL under CI=true: %v", startErr)
	}
	t.Skipf("no PostgreSQL for this test: %v", startErr)
}

// Holders returns the backend pids that hold the advisory lock key (bigint form) on the
// server at dsn, as its own pg_locks shows them: the view tests need of a server other
// than the one they share (a standby, a promoted server).
func Holders(ctx context.Context, dsn string, key int64) ([]uint32, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return nil, err
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory'
		AND granted AND objsubid = 1 AND classid = $1 AND objid = $2 ORDER BY pid`, uint32(uint64(key)>>32), uint32(key))
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[uint32])
}
