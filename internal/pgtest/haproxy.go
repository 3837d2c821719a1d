package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// HAProxy is a running haproxy in TCP mode in front of a Server, as a Patroni cluster's
// clients reach its primary: each client connection is spliced to a connection of its
// own to the server, and the server's startup reply (BackendKeyData too) passes through
// unchanged, so a client sees its backend's own pid. HAProxy answers the client's TCP
// keepalives itself. Close stops it.
type HAProxy struct {
	dsn  string // a client's, through the proxy
	port int
	dir  string // haproxy.cfg, stderr.log
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for

	closeOnce sync.Once
	closeErr  error
}

// HAProxyOptions are the settings of a started HAProxy that tests vary.
type HAProxyOptions struct {
	// ShutdownSessions adds on-marked-down shutdown-sessions to the server line: when the
	// health check marks the server down, HAProxy closes every session through it.
	// Patroni's sample configuration leaves it out.
	ShutdownSessions bool
	// Timeout is HAProxy's timeout client and timeout server (an idle session is closed
	// after it); 0 means Patroni's sample value, 30m.
	Timeout time.Duration
	// CheckUser, if set, makes the health check a PostgreSQL startup as that user
	// (option pgsql-check), which a frozen postmaster fails, instead of a TCP connect,
	// which its kernel still accepts.
	CheckUser string
}

// StartHAProxy starts Debian's haproxy (`haproxy -f cfg -db`, in the foreground, as this
// process's user) on a free loopback port in front of srv, in TCP mode, with a health
// check every second (fall 3, rise 2; see HAProxyOptions.CheckUser), and blocks until a query through it succeeds or ctx
// ends. It returns an error wrapping [ErrUnavailable] when haproxy is not installed. On
// error nothing is left running.
func StartHAProxy(ctx context.Context, srv *Server, opts HAProxyOptions) (*HAProxy, error) {
	bin, err := debianBinary("haproxy", "haproxy")
	if err != nil {
		return nil, err
	}
	up, err := pgconn.ParseConfig(srv.DSN())
	if err != nil {
		return nil, fmt.Errorf("pgtest: haproxy: parse the server DSN: %w", err)
	}
	var lastErr error
	for try := 0; try < 3; try++ { // the free port may be taken before haproxy binds it
		h := &HAProxy{}
		if lastErr = h.start(ctx, bin, srv.DSN(), up, opts); lastErr == nil {
			return h, nil
		}
		if !strings.Contains(lastErr.Error(), "exited during start-up") {
			break
		}
	}
	return nil, lastErr
}

// start writes the configuration, runs haproxy and waits until it serves a query.
func (h *HAProxy) start(ctx context.Context, bin, dsn string, up *pgconn.Config, opts HAProxyOptions) error {
	dir, err := os.MkdirTemp("", "haproxy")
	if err != nil {
		return err
	}
	h.dir = dir
	h.port, err = pglocal.FreePort()
	if err == nil {
		h.dsn = WithPairs(dsn, "host=127.0.0.1", "port="+strconv.Itoa(h.port))
		err = os.WriteFile(filepath.Join(dir, "haproxy.cfg"), []byte(haproxyConfig(h.port, up, opts)), 0o644)
	}
	if err == nil {
		err = h.run(bin)
	}
	if err == nil {
		err = h.waitReady(ctx)
	}
	if err != nil {
		h.Close()
	}
	return err
}

// haproxyConfig is the configuration: one TCP listener on port, one server, as a Patroni
// primary's listener has it (without Patroni's REST check: the test server has none).
func haproxyConfig(port int, up *pgconn.Config, opts HAProxyOptions) string {
	timeout := opts.Timeout
	if timeout == 0 {
		timeout = 30 * time.Minute
	}
	server := fmt.Sprintf("%s:%d", up.Host, up.Port)
	if strings.HasPrefix(up.Host, "/") { // a Unix socket directory
		server = fmt.Sprintf("%s/.s.PGSQL.%d", up.Host, up.Port)
	}
	down := ""
	if opts.ShutdownSessions {
		down = " on-marked-down shutdown-sessions"
	}
	check := ""
	if opts.CheckUser != "" {
		check = "    option pgsql-check user " + opts.CheckUser + "\n"
	}
	ms := strconv.FormatInt(timeout.Milliseconds(), 10) + "ms"
	return "global\n    maxconn 200\n\n" +
		"defaults\n    mode tcp\n    timeout connect 5s\n    timeout client " + ms + "\n    timeout server " + ms + "\n\n" +
		"listen primary\n    bind 127.0.0.1:" + strconv.Itoa(port) + "\n" + check +
		"    server pg " + server + " check inter 1s fall 3 rise 2" + down + "\n"
}

// run starts the process in the foreground (-db), tied to this one.
func (h *HAProxy) run(bin string) error {
	out, err := os.Create(filepath.Join(h.dir, "stderr.log"))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(bin, "-f", filepath.Join(h.dir, "haproxy.cfg"), "-db")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Dir = h.dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := pglocal.StartTied(cmd, syscall.SIGTERM); err != nil {
		return fmt.Errorf("pgtest: haproxy: %w", err)
	}
	h.cmd, h.exit = cmd, make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { cmd.Wait(); close(exit) }(h.cmd, h.exit)
	return nil
}

// waitReady polls until a query through the proxy succeeds, bounded by 30 s, ctx, and
// the process's exit (it exits when another process took the port first).
func (h *HAProxy) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-h.exit:
			return fmt.Errorf("pgtest: haproxy exited during start-up: %s", h.Log())
		default:
		}
		err := h.ping(ctx)
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: haproxy not ready after 30s: %w\n%s", err, h.Log())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (h *HAProxy) ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, WithPairs(h.dsn, "connect_timeout=2"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "SELECT 1")
	return err
}

// DSN returns the connection string of a client through the proxy.
func (h *HAProxy) DSN() string { return h.dsn }

// Port returns the proxy's TCP port on 127.0.0.1.
func (h *HAProxy) Port() int { return h.port }

// Log returns what haproxy has written so far (for test failure messages).
func (h *HAProxy) Log() string {
	data, _ := os.ReadFile(filepath.Join(h.dir, "stderr.log"))
	return string(data)
}

// Close stops haproxy, if it runs (SIGTERM: it closes every session at once; SIGKILL of
// its process group after 10 s), and removes its files. It blocks until the process has
// exited. Later calls return the first call's result.
func (h *HAProxy) Close() error {
	h.closeOnce.Do(func() {
		if h.cmd != nil {
			h.closeErr = stopGroup(h.cmd, h.exit, syscall.SIGTERM, "haproxy")
		}
		if err := os.RemoveAll(h.dir); err != nil && h.closeErr == nil {
			h.closeErr = err
		}
	})
	return h.closeErr
}

// HAProxyForTest starts HAProxy in front of srv for one test and stops it when the test
// ends. Without haproxy installed the test is skipped with the reason, except under
// CI=true, where that fails it (.ci/run installs haproxy). Any other error fails the test.
func HAProxyForTest(t T, srv *Server, opts HAProxyOptions) *HAProxy {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := StartHAProxy(ctx, srv, opts)
	if errors.Is(err, ErrUnavailable) && !InCI() {
		t.Skipf("no HAProxy for this test: %v", err)
	}
	if err != nil {
		t.Fatalf("HAProxy: %v", err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}
