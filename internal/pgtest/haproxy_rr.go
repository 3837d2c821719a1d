package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// RoundRobin is a running HAProxy (Debian's haproxy) in TCP mode with balance
// roundrobin over loopback PostgreSQL servers that know nothing of each other: each new
// client connection goes to the next server in turn, as a proxy in front of a cluster
// does while it switches over. Clients connect to DSN().
type RoundRobin struct {
	dir  string
	port int
	cmd  *exec.Cmd
	exit chan struct{}
}

// StartRoundRobin starts HAProxy on a free loopback port in front of the servers at
// ports (each a PostgreSQL on 127.0.0.1 with user postgres, trust), and blocks until it
// accepts connections or ctx ends. It returns an error wrapping [ErrUnavailable] when
// haproxy is not installed.
func StartRoundRobin(ctx context.Context, ports ...int) (*RoundRobin, error) {
	bin, err := debianBinary("haproxy", "haproxy")
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-haproxy-")
	if err != nil {
		return nil, err
	}
	r := &RoundRobin{dir: dir}
	if r.port, err = pglocal.FreePort(); err != nil {
		r.Close()
		return nil, err
	}
	cfg := filepath.Join(dir, "haproxy.cfg")
	if err := os.WriteFile(cfg, []byte(roundRobinConfig(r.port, ports)), 0o644); err != nil {
		r.Close()
		return nil, err
	}
	if err := r.run(bin, cfg); err != nil {
		r.Close()
		return nil, err
	}
	if err := r.waitListening(ctx); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// roundRobinConfig is HAProxy's configuration: TCP mode, long client and server
// timeouts (a held lock's connection is idle for long), no health checks.
func roundRobinConfig(port int, servers []int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "global\n\tmaxconn 200\n\ndefaults\n\tmode tcp\n\ttimeout connect 5s\n"+
		"\ttimeout client 1h\n\ttimeout server 1h\n\nlisten pg\n\tbind 127.0.0.1:%d\n\tbalance roundrobin\n", port)
	for i, p := range servers {
		fmt.Fprintf(&b, "\tserver pg%d 127.0.0.1:%d\n", i, p)
	}
	return b.String()
}

func (r *RoundRobin) run(bin, cfg string) error {
	out, err := os.Create(filepath.Join(r.dir, "haproxy.log"))
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(bin, "-db", "-f", cfg) // -db: foreground, no daemon
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stdout, cmd.Stderr = out, out
	if err := pglocal.StartTied(cmd, syscall.SIGTERM); err != nil {
		return fmt.Errorf("pgtest: haproxy: %w", err)
	}
	r.cmd, r.exit = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(r.exit) }()
	return nil
}

// waitListening polls HAProxy's port until it accepts a TCP connection, bounded by 30 s,
// ctx, and the process's exit.
func (r *RoundRobin) waitListening(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(r.port))
	for {
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		select {
		case <-r.exit:
			return fmt.Errorf("pgtest: haproxy exited: %s", r.Log())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("pgtest: haproxy did not listen within 30 s: " + r.Log())
		}
	}
}

// DSN returns the keyword/value connection string of a client of the servers through
// HAProxy.
func (r *RoundRobin) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", r.port)
}

// Log returns what HAProxy has written so far (for test failure messages).
func (r *RoundRobin) Log() string {
	data, _ := os.ReadFile(filepath.Join(r.dir, "haproxy.log"))
	return string(data)
}

// Close stops HAProxy (SIGTERM, then SIGKILL of its process group after 10 s), waits for
// it to exit, and removes its files.
func (r *RoundRobin) Close() error {
	if r.cmd != nil {
		stopGroup(r.cmd, r.exit, syscall.SIGTERM, "haproxy") // killed or not, it has exited
	}
	return os.RemoveAll(r.dir)
}

// RoundRobinForTest starts two independent throwaway PostgreSQL servers and HAProxy in
// round-robin over them, for one test, and stops all three when the test ends. Without
// haproxy or the server binaries the test is skipped with the reason, except under
// CI=true, where that fails it (.ci/run installs haproxy). Any other error fails the
// test.
func RoundRobinForTest(t T) *RoundRobin {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srvs, errs := make([]*Server, 2), make([]error, 2)
	var wg sync.WaitGroup
	for i := range srvs { // at once: initdb and start-up mostly wait
		wg.Add(1)
		go func() {
			defer wg.Done()
			srvs[i], errs[i] = StartLocal(ctx, Options{})
		}()
	}
	wg.Wait()
	var ports []int
	for _, s := range srvs {
		if s != nil {
			t.Cleanup(func() { s.Close() })
			ports = append(ports, s.Port())
		}
	}
	if err := errors.Join(errs...); err != nil {
		unavailable(t, "a PostgreSQL server", err)
	}
	r, err := StartRoundRobin(ctx, ports...)
	if err != nil {
		unavailable(t, "HAProxy", err)
	}
	t.Cleanup(func() { r.Close() })
	return r
}

// unavailable skips the test (fails it under CI=true) if err wraps ErrUnavailable, and
// fails it otherwise.
func unavailable(t T, what string, err error) {
	t.Helper()
	if errors.Is(err, ErrUnavailable) && !InCI() {
		t.Skipf("no %s for this test: %v", what, err)
	}
	t.Fatalf("%s: %v", what, err)
}
