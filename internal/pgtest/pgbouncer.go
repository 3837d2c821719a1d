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
	dir  string // pgbouncer.ini, userlist.txt, pgbouncer.log
	port int
	user string
	db   string
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for

	closeOnce sync.Once
	closeErr  error
}

// StartPgBouncer starts Debian's pgbouncer (as the postgres OS user when we are root) on a
// free loopback port in front of srv, in the given pool mode, and blocks until a query
// through it succeeds or ctx ends. The settings, chosen on purpose:
//
//   - auth_type=trust with an auth_file naming the server DSN's user (trust still needs the
//     user listed); the file's password, the server DSN's, is what PgBouncer logs in with;
//   - default_pool_size=[PgBouncerPoolSize] ([PgBouncerSessionPoolSize] in session mode;
//     see [WithPoolSize]), no reserve pool; max_client_conn=200;
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
		b := &PgBouncer{mode: mode, user: up.User, db: up.Database}
		if lastErr = b.start(ctx, bin, up, set); lastErr == nil {
			return b, nil
		}
		if !strings.Contains(lastErr.Error(), "Address already in use") {
			break
		}
	}
	return nil, lastErr
}

func pgbouncerBinary() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	if _, err := os.Stat("/usr/sbin/pgbouncer"); err == nil {
		return "/usr/sbin/pgbouncer", nil
	}
	return "", fmt.Errorf("%w: pgbouncer is not installed (Debian: apt-get install pgbouncer)", ErrUnavailable)
}

// start writes the configuration, runs pgbouncer and waits until it serves a query.
func (b *PgBouncer) start(ctx context.Context, bin string, up *pgconn.Config, set pgbouncerSettings) error {
	dir, err := os.MkdirTemp("/tmp", "pgb")
	if err != nil {
		return err
	}
	b.dir = dir
	cred, err := pglocal.OwnDir(dir)
	if err == nil {
		b.port, err = pglocal.FreePort()
	}
	if err == nil {
		err = b.writeConfig(up, set, cred)
	}
	if err == nil {
		err = b.run(bin, cred)
	}
	if err == nil {
		err = b.waitReady(ctx)
	}
	if err != nil {
		b.Close()
	}
	return err
}

func (b *PgBouncer) writeConfig(up *pgconn.Config, set pgbouncerSettings, cred *syscall.Credential) error {
	poolSize := PgBouncerPoolSize
	switch {
	case set.poolSize > 0:
		poolSize = set.poolSize
	case b.mode == PoolSession:
		poolSize = PgBouncerSessionPoolSize
	}
	db := fmt.Sprintf("host=%s port=%d dbname=%s", up.Host, up.Port, b.db)
	if set.connectQuery != "" {
		db += " connect_query='" + strings.ReplaceAll(set.connectQuery, "'", "''") + "'"
	}
	ini := fmt.Sprintf(`[databases]
%s = %s

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
admin_users = %s
pool_mode = %s
default_pool_size = %d
reserve_pool_size = 0
max_client_conn = 200
ignore_startup_parameters = extra_float_digits
server_login_retry = 1
logfile = %s
client_idle_timeout = %d
`, b.db, db, b.port, filepath.Join(b.dir, "userlist.txt"), b.user, b.mode,
		poolSize, filepath.Join(b.dir, "pgbouncer.log"), set.clientIdleTimeout)
	users := fmt.Sprintf("%q %q\n", b.user, up.Password)
	for name, content := range map[string]string{"pgbouncer.ini": ini, "userlist.txt": users} {
		path := filepath.Join(b.dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			return err
		}
		if cred != nil {
			if err := os.Chown(path, int(cred.Uid), int(cred.Gid)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (b *PgBouncer) run(bin string, cred *syscall.Credential) error {
	out, err := os.OpenFile(filepath.Join(b.dir, "stderr.log"), os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	b.cmd = exec.Command(bin, filepath.Join(b.dir, "pgbouncer.ini"))
	b.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	b.cmd.Dir = b.dir
	b.cmd.Stdout, b.cmd.Stderr = out, out
	if err := pglocal.StartTied(b.cmd, syscall.SIGTERM); err != nil { // SIGTERM: immediate shutdown
		b.cmd = nil
		return fmt.Errorf("pgtest: pgbouncer: %w", err)
	}
	b.exit = make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { cmd.Wait(); close(exit) }(b.cmd, b.exit)
	return nil
}

// waitReady polls until a query through PgBouncer succeeds (so that it reached the server
// too), bounded by 30 s, ctx, and the process's exit.
func (b *PgBouncer) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := b.ping(ctx)
		if err == nil {
			return nil
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

// DSN returns the keyword/value connection string of a client of PgBouncer.
func (b *PgBouncer) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", b.port, b.user, b.db)
}

// AdminDSN returns the connection string of PgBouncer's admin console (database
// pgbouncer, which speaks only the simple query protocol).
func (b *PgBouncer) AdminDSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=pgbouncer sslmode=disable "+
		"default_query_exec_mode=simple_protocol", b.port, b.user)
}

// Mode returns the pool mode PgBouncer runs in.
func (b *PgBouncer) Mode() PoolMode { return b.mode }

// Port returns PgBouncer's loopback TCP port.
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

// Close stops PgBouncer and removes its files. It asks for an immediate shutdown
// (SIGTERM: server connections are closed, so their backends end and release whatever
// they hold), and kills the process group if it has not exited within 10 s. It blocks until
// the process has exited. Later calls return the first call's result.
func (b *PgBouncer) Close() error {
	b.closeOnce.Do(func() {
		if b.cmd != nil {
			syscall.Kill(b.cmd.Process.Pid, syscall.SIGTERM)
			select {
			case <-b.exit:
			case <-time.After(10 * time.Second):
				syscall.Kill(-b.cmd.Process.Pid, syscall.SIGKILL)
				<-b.exit
				b.closeErr = errors.New("pgtest: pgbouncer ignored SIGTERM for 10s; killed")
			}
		}
		if err := os.RemoveAll(b.dir); err != nil && b.closeErr == nil {
			b.closeErr = err
		}
	})
	return b.closeErr
}
