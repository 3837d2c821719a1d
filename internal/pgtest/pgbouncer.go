package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// PoolMode is PgBouncer's pool_mode: when a server connection goes back to the pool.
type PoolMode string

// The three pool modes.
const (
	PoolSession     PoolMode = "session"     // when the client disconnects
	PoolTransaction PoolMode = "transaction" // after each transaction
	PoolStatement   PoolMode = "statement"   // after each statement
)

// PgBouncerPoolSize is the number of server connections a PgBouncer started by this package
// opens at most (default_pool_size) in transaction and statement mode: small, so that a
// few busy clients are enough to move a client's statements between backends, as in
// production under load.
const PgBouncerPoolSize = 3

// PgBouncerSessionPoolSize is default_pool_size in session mode, where each client keeps
// its server connection until it disconnects: room for a test's clients and a few busy
// ones at once.
const PgBouncerSessionPoolSize = 20

// PgBouncer is a running pgbouncer in front of a Server. Clients connect to DSN(); it
// logs into the server with the server DSN's user and password. Close stops it.
type PgBouncer struct {
	mode PoolMode
	set  pgbouncerSettings
	dir  string // pgbouncer.ini, userlist.txt, pgbouncer.log
	host string // where this process reaches it
	port int
	user string
	db   string
	bin  string
	cred *syscall.Credential // the postgres OS user's, when we are root
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for
	// listened counts the "listening on" lines in the log before the last start (see
	// waitReady).
	listened int

	closeOnce sync.Once
	closeErr  error
}

// StartPgBouncer starts Debian's pgbouncer (as the postgres OS user when we are root) on a
// free loopback port in front of srv (or in a [PoolerNet], [WithPoolerNet]), in the given
// pool mode, and blocks until a query through it succeeds or ctx ends. The settings,
// chosen on purpose:
//
//   - auth_type=trust with an auth_file naming the server DSN's user (trust still needs the
//     user listed); the file's password, the server DSN's, is what PgBouncer logs in with;
//   - default_pool_size=[PgBouncerPoolSize] ([PgBouncerSessionPoolSize] in session mode),
//     no reserve pool; max_client_conn=200;
//   - ignore_startup_parameters=extra_float_digits (pgx and libpq send it; application_name,
//     which PgBouncer tracks itself, passes through);
//   - server_reset_query left at its default, DISCARD ALL, which PgBouncer runs only in
//     session mode (server_reset_query_always=0): the production set-up;
//   - server_login_retry=1 (not 15 s), no Unix socket, the admin console open to the user.
//
// It returns an error wrapping [ErrUnavailable] when pgbouncer is not installed. On error
// nothing is left running.
func StartPgBouncer(ctx context.Context, srv *Server, mode PoolMode, opts ...PgBouncerOption) (*PgBouncer, error) {
	var set pgbouncerSettings
	for _, opt := range opts {
		opt(&set)
	}
	bin, err := pgbouncerBinary()
	if err != nil {
		return nil, err
	}
	up, err := pgconn.ParseConfig(srv.DSN())
	if err != nil {
		return nil, fmt.Errorf("pgtest: pgbouncer: parse the server DSN: %w", err)
	}
	var lastErr error
	for try := 0; try < 3; try++ { // the free port may be taken before pgbouncer binds it
		b := &PgBouncer{mode: mode, set: set, host: "127.0.0.1", user: up.User, db: up.Database, bin: bin}
		if set.net != nil {
			b.host = set.net.poolerUpIP
		}
		if lastErr = b.start(ctx, up); lastErr == nil {
			return b, nil
		}
		if !strings.Contains(lastErr.Error(), "Address already in use") {
			break
		}
	}
	return nil, lastErr
}

func pgbouncerBinary() (string, error) { return debianBinary("pgbouncer", "pgbouncer") }

// start writes the configuration, runs pgbouncer and waits until it serves a query.
func (b *PgBouncer) start(ctx context.Context, up *pgconn.Config) error {
	dir, err := os.MkdirTemp("/tmp", "pgb")
	if err != nil {
		return err
	}
	b.dir = dir
	b.cred, err = pglocal.OwnDir(dir)
	if err == nil {
		b.port, err = pglocal.FreePort()
		if p := firstPort.Swap(0); p != 0 {
			b.port = int(p)
		}
	}
	if err == nil {
		err = b.writeConfig(up)
	}
	if err == nil {
		err = b.run()
	}
	if err == nil {
		err = b.waitReady(ctx)
	}
	if err != nil {
		b.Close()
	}
	return err
}

// firstPort, when not 0, is the port the next start tries, whatever FreePort says:
// tests only (see export_test.go).
var firstPort atomic.Int64

// run starts the process, in the pooler namespace if there is one.
func (b *PgBouncer) run() error {
	b.listened = strings.Count(b.Log(), "listening on") // the lines of earlier starts (see Restart)
	out, err := os.OpenFile(filepath.Join(b.dir, "stderr.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(b.bin, filepath.Join(b.dir, "pgbouncer.ini"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: b.cred}
	cmd.Dir = b.dir
	cmd.Stdout, cmd.Stderr = out, out
	if b.set.net != nil {
		err = startInNetns(cmd, syscall.SIGTERM, b.set.net.poolerNS) // SIGTERM: immediate shutdown
	} else {
		err = pglocal.StartTied(cmd, syscall.SIGTERM)
	}
	if err != nil {
		return fmt.Errorf("pgtest: pgbouncer: %w", err)
	}
	b.cmd, b.exit = cmd, make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { cmd.Wait(); close(exit) }(b.cmd, b.exit)
	return nil
}

// waitReady polls until a query through PgBouncer succeeds (so that it reached the server
// too), bounded by 30 s, ctx, and the process's exit. The answer must be this process's:
// its log says it listens. Another process that bound the free port first (a PgBouncer
// of a test running beside this one) answers too; this one then exits, unable to bind,
// and the caller tries another port.
func (b *PgBouncer) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := b.ping(ctx)
		if err == nil && strings.Count(b.Log(), "listening on") > b.listened {
			return nil
		}
		if err == nil {
			err = errors.New("a query succeeded, but this pgbouncer has not logged that it listens")
		}
		select {
		case <-b.exit:
			return fmt.Errorf("pgtest: pgbouncer exited during start-up: %s", b.Log())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: pgbouncer not ready after 30s: %w\n%s", err, b.Log())
		}
	}
}

func (b *PgBouncer) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, WithParams(b.DSN(), map[string]string{
		"connect_timeout": "2", "default_query_exec_mode": "simple_protocol"}))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// DSN returns the keyword/value connection string of a client of PgBouncer in this
// process's network namespace (the host's loopback, or the pooler's end of the server
// link with [WithPoolerNet]).
func (b *PgBouncer) DSN() string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=%s sslmode=disable", b.host, b.port, b.user, b.db)
}

// AdminDSN returns the connection string of PgBouncer's admin console (database
// pgbouncer, which speaks only the simple query protocol).
func (b *PgBouncer) AdminDSN() string {
	return fmt.Sprintf("host=%s port=%d user=%s dbname=pgbouncer sslmode=disable "+
		"default_query_exec_mode=simple_protocol", b.host, b.port, b.user)
}

// Mode returns the pool mode PgBouncer runs in.
func (b *PgBouncer) Mode() PoolMode { return b.mode }

// Port returns PgBouncer's TCP port.
func (b *PgBouncer) Port() int { return b.port }

// Log returns what PgBouncer has logged so far (for test failure messages).
func (b *PgBouncer) Log() string {
	var out []byte
	for _, name := range []string{"pgbouncer.log", "stderr.log"} {
		data, _ := os.ReadFile(filepath.Join(b.dir, name))
		out = append(out, data...)
	}
	return string(out)
}

// Close stops PgBouncer, if it runs, and removes its files. It asks for an immediate shutdown
// (SIGTERM: server connections are closed, so their backends end and release whatever
// they hold), and kills the process group if it has not exited within 10 s. It blocks until
// the process has exited. Later calls return the first call's result.
func (b *PgBouncer) Close() error {
	b.closeOnce.Do(func() {
		if b.cmd != nil && b.running() {
			b.closeErr = stopGroup(b.cmd, b.exit, syscall.SIGTERM, "pgbouncer")
		}
		if err := os.RemoveAll(b.dir); err != nil && b.closeErr == nil {
			b.closeErr = err
		}
	})
	return b.closeErr
}
