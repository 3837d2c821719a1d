package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// local is a cluster run from the local PostgreSQL binaries.
type local struct {
	opts Options
	bin  string // directory holding initdb and postgres
	dir  string // temp dir: data/, socket, log
	port int
	cred *syscall.Credential // nil unless running as root
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for
}

func startLocal(ctx context.Context, opts Options) (*Server, error) {
	bin, err := findBinaries()
	if err != nil {
		return nil, err
	}
	l := &local{bin: bin, opts: opts}
	if err := l.prepare(); err != nil {
		return nil, err
	}
	if err := l.initdb(ctx); err != nil {
		os.RemoveAll(l.dir)
		return nil, err
	}
	if err := l.start(ctx); err != nil {
		os.RemoveAll(l.dir)
		return nil, err
	}
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", l.port)
	return &Server{dsn: dsn, kind: "local", port: l.port, restart: l.restart, stop: l.close}, nil
}

// findBinaries locates a directory with initdb and postgres: the directory named by
// EnvPGBin if it is set (an error if it lacks them: a version run must not silently test
// another version), else PATH, else the Debian layout /usr/lib/postgresql/N/bin (newest N
// first).
func findBinaries() (string, error) {
	if dir := strings.TrimSpace(os.Getenv(EnvPGBin)); dir != "" {
		for _, name := range []string{"initdb", "postgres"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return "", fmt.Errorf("%s=%s: %w", EnvPGBin, dir, err)
			}
		}
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real // a link in /usr/local/bin: the real directory has pg_basebackup too
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("initdb not found in PATH or /usr/lib/postgresql/*/bin")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// prepare makes the temp dir (short path: the socket path is limited to 107 bytes), picks a
// port, and arranges to run as the postgres user when we are root (initdb refuses root).
func (l *local) prepare() error {
	dir, err := os.MkdirTemp("/tmp", "pgt")
	if err != nil {
		return err
	}
	l.dir = dir
	if l.cred, err = ownDir(dir); err != nil {
		return err
	}
	l.port, err = freePort()
	return err
}

// ownDir arranges for a server program (postgres, pgbouncer: both refuse to run as root)
// to run as the postgres OS user when we are root: it chowns dir to that user and returns
// the credential to run with; nil when we are not root.
func ownDir(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres OS user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func (l *local) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(l.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: l.cred}
	cmd.Dir = l.dir
	return cmd
}

// startTied starts a server process that gets sig if this process dies without stopping
// it (a test binary that panics or is killed runs no cleanup), so no server outlives its
// test run. The parent-death signal fires when the thread that forked the child exits:
// fork from a thread locked for the call, which goes back to the runtime's pool (and
// lives as long as the process) when unlocked.
func startTied(cmd *exec.Cmd, sig syscall.Signal) error {
	cmd.SysProcAttr.Pdeathsig = sig
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}

func (l *local) initdb(ctx context.Context) error {
	cmd := l.command(ctx, "initdb", "--no-sync", "-A", "trust", "-E", "UTF8", "--locale=C",
		"-U", "postgres", "-D", filepath.Join(l.dir, "data"))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w: %s", err, out)
	}
	if len(l.opts.TrustCIDRs) == 0 {
		return nil
	}
	hba, err := os.OpenFile(filepath.Join(l.dir, "data", "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer hba.Close()
	for _, cidr := range l.opts.TrustCIDRs {
		if _, err := fmt.Fprintf(hba, "host all all %s trust\n", cidr); err != nil {
			return err
		}
	}
	return nil
}

// start runs postgres in its own process group and waits until it accepts connections.
func (l *local) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(l.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := l.command(context.Background(), "postgres", "-D", filepath.Join(l.dir, "data"),
		"-p", strconv.Itoa(l.port), "-k", l.dir,
		"-c", "listen_addresses="+strings.Join(append([]string{"127.0.0.1"}, l.opts.ListenAddresses...), ","),
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		"-c", "max_connections=300", "-c", "shared_buffers=64MB",
		// What a streaming standby (StartStandby) needs of its primary; initdb's pg_hba.conf
		// already admits replication from 127.0.0.1 with -A trust.
		"-c", "wal_level=replica", "-c", "max_wal_senders=10")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := startTied(cmd, syscall.SIGQUIT); err != nil { // SIGQUIT: immediate shutdown
		return fmt.Errorf("postgres: %w", err)
	}
	l.cmd, l.exit = cmd, make(chan struct{})
	go func(exit chan struct{}) { cmd.Wait(); close(exit) }(l.exit)
	return l.waitReady(ctx)
}

func (l *local) waitReady(ctx context.Context) error {
	dsn := fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable connect_timeout=2", l.port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		conn, err := pgx.Connect(ctx, dsn)
		if err == nil {
			return conn.Close(ctx)
		}
		select {
		case <-l.exit:
			log, _ := os.ReadFile(filepath.Join(l.dir, "server.log"))
			return fmt.Errorf("postgres exited during start-up: %s", log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after 60s: %w", err)
		}
	}
}

// stopServer asks for a fast shutdown (SIGINT), then kills the process group after 10 s.
func (l *local) stopServer() {
	if l.cmd == nil {
		return
	}
	syscall.Kill(-l.cmd.Process.Pid, syscall.SIGINT)
	select {
	case <-l.exit:
	case <-time.After(10 * time.Second):
		syscall.Kill(-l.cmd.Process.Pid, syscall.SIGKILL)
		<-l.exit
	}
	l.cmd = nil
}

func (l *local) restart(ctx context.Context) error {
	l.stopServer()
	return l.start(ctx)
}

func (l *local) close() error {
	l.stopServer()
	return os.RemoveAll(l.dir)
}
