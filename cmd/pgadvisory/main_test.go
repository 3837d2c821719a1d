package main_test

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The CLI is built once and driven as a subprocess against the harness's server.
var (
	srv      *pgtest.Server
	startErr error
	bin      string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	dir, err := os.MkdirTemp("", "pgadvisory-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	bin = filepath.Join(dir, "pgadvisory")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "FAIL: build pgadvisory: %v\n%s", err, out)
		return 1
	}
	srv, startErr = pgtest.Start(context.Background())
	if startErr != nil {
		if pgtest.InCI() {
			fmt.Fprintf(os.Stderr, "FAIL: CI=true and no PostgreSQL: %v\n", startErr)
			return 1
		}
		return m.Run()
	}
	defer srv.Close()
	return m.Run()
}

func dsn(t testing.TB) string {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	return srv.DSN()
}

// result is a finished pgadvisory process.
type result struct {
	code           int
	stdout, stderr string
	took           time.Duration
}

// cli runs pgadvisory with args (the DSN comes from DATABASE_URL) and waits for it.
func cli(t testing.TB, args ...string) result {
	t.Helper()
	return wait(t, start(t, args...))
}

type proc struct {
	cmd            *exec.Cmd
	stdout, stderr *bytes.Buffer
	started        time.Time
}

func start(t testing.TB, args ...string) *proc {
	t.Helper()
	return startEnv(t, []string{"DATABASE_URL=" + dsn(t)}, args...)
}

// startEnv starts pgadvisory with env added to (and overriding) the test's environment.
func startEnv(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(bin, args...), stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	p.started = time.Now()
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

func wait(t testing.TB, p *proc) result {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(60 * time.Second):
		p.cmd.Process.Kill()
		t.Fatalf("pgadvisory %v did not finish; stderr:\n%s", p.cmd.Args[1:], p.stderr)
	}
	code := p.cmd.ProcessState.ExitCode()
	if ws := p.cmd.ProcessState.Sys().(syscall.WaitStatus); ws.Signaled() {
		code = 128 + int(ws.Signal())
	}
	return result{code, p.stdout.String(), p.stderr.String(), time.Since(p.started)}
}

// holdLock takes name through the library for the test's duration.
func holdLock(t testing.TB, name string, extra string) (*advisory.Manager, *advisory.Lock) {
	t.Helper()
	ctx := context.Background()
	m, err := advisory.New(ctx, pgtest.WithPairs(dsn(t), strings.Fields(extra)...))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	return m, l
}

// waitHeldByApp waits until a session with application_name app holds name.
func waitHeldByApp(t testing.TB, m *advisory.Manager, name, app string) advisory.Holder {
	t.Helper()
	var found advisory.Holder
	require.Eventually(t, func() bool {
		hs, err := m.Holders(context.Background(), name)
		require.NoError(t, err)
		for _, h := range hs {
			if h.Granted && h.ApplicationName == app {
				found = h
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "%q never held by %q", name, app)
	return found
}
