package main_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The CLI is built once and driven as a subprocess against the harness's server.
var (
	srv      *pgtest.Server
	startErr error
	bin      string
	// staticBin is bin when it was built as the binary ships (no -race: CGO_ENABLED=0).
	staticBin string
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		return m.Run() // fuzzing (and its worker processes) needs neither the binary nor a server
	}
	dir, err := os.MkdirTemp("", "pgadvisory-cli")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	defaultSignalsForChildren()
	skipPgWrapper()
	bin = os.Getenv(envBin) // a nested run (TestSuiteUnderIgnoredSignals) reuses the binary
	if bin == "" {
		bin = filepath.Join(dir, "pgadvisory")
		// Built with the test's own flags: under CI's -race the CLI process is checked for
		// races too. Without -race it is the static binary as it ships (CGO_ENABLED=0),
		// which TestBinaryIsSlimAndStatic then inspects; under -race that test builds one.
		build := exec.Command("go", "build", "-o", bin, ".")
		if goflags := os.Getenv("GOFLAGS"); withoutRace(goflags) == strings.Join(strings.Fields(goflags), " ") {
			build.Env = append(os.Environ(), "CGO_ENABLED=0")
			staticBin = bin
		}
		if out, err := build.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "FAIL: build pgadvisory: %v\n%s", err, out)
			return 1
		}
	}
	// Its tests mostly wait on the CLI's processes and the server: more of them run at
	// once than there are CPUs (an explicit -parallel wins).
	return pgtest.Suite{Srv: &srv, Err: &startErr, Parallel: 8}.Run(m)
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
	stdout, stderr *output
	started        time.Time
}

// output collects what a process writes, and can be read while the process runs.
type output struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	written chan struct{} // closed and replaced at every write
	first   time.Time     // when the first write came
}

func newOutput() *output { return &output{written: make(chan struct{})} }

func (o *output) Write(p []byte) (int, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	close(o.written)
	o.written = make(chan struct{})
	if o.first.IsZero() {
		o.first = time.Now()
	}
	return o.buf.Write(p)
}

// firstWrite returns when the first write came (zero: none yet).
func (o *output) firstWrite() time.Time {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.first
}

func (o *output) String() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.buf.String()
}

// waitFor waits until the output contains want, and returns the output.
func (o *output) waitFor(t testing.TB, want string, timeout time.Duration) string {
	t.Helper()
	return o.waitUntil(t, timeout, fmt.Sprintf("contained %q", want), func(s string) bool { return strings.Contains(s, want) })
}

// waitUntil waits until cond holds for the output, and returns the output.
func (o *output) waitUntil(t testing.TB, timeout time.Duration, what string, cond func(string) bool) string {
	t.Helper()
	deadline := time.After(timeout)
	for {
		o.mu.Lock()
		s, written := o.buf.String(), o.written
		o.mu.Unlock()
		if cond(s) {
			return s
		}
		select {
		case <-written:
		case <-deadline:
			t.Fatalf("output never %s; it is:\n%s", what, s)
		}
	}
}

func start(t testing.TB, args ...string) *proc {
	t.Helper()
	return startEnv(t, []string{"DATABASE_URL=" + dsn(t)}, args...)
}

// startEnv starts pgadvisory with env added to (and overriding) the test's environment.
func startEnv(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	return startArgv(t, env, append([]string{bin}, args...)...)
}

// startArgv starts the program argv[0] (pgadvisory, or a shell that runs it) with env
// added to the test's environment.
func startArgv(t testing.TB, env []string, argv ...string) *proc {
	t.Helper()
	return startStdin(t, nil, env, argv...)
}

// startStdin is startArgv with stdin as the program's standard input (nil: /dev/null).
func startStdin(t testing.TB, stdin *os.File, env []string, argv ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(argv[0], argv[1:]...), stdout: newOutput(), stderr: newOutput()}
	p.cmd.Env = append(os.Environ(), env...)
	p.cmd.Stdout, p.cmd.Stderr = p.stdout, p.stderr
	if stdin != nil {
		p.cmd.Stdin = stdin
	}
	p.started = time.Now()
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() { p.cmd.Process.Kill() })
	return p
}

// noDB runs pgadvisory without a database (DATABASE_URL empty) and waits for it.
func noDB(t testing.TB, args ...string) result {
	t.Helper()
	return wait(t, startEnv(t, []string{"DATABASE_URL="}, args...))
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
	return resultOf(p)
}

// resultOf is what p, waited for, ended with: its exit code (128+N if signal N killed it,
// as shells report it), its output, and how long it ran.
func resultOf(p *proc) result {
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

// waitForWaiter waits until a session with application_name app ("": any) waits for name.
func waitForWaiter(t testing.TB, m *advisory.Manager, name, app string) {
	t.Helper()
	require.Eventually(t, func() bool {
		hs, err := m.Holders(context.Background(), name)
		require.NoError(t, err)
		for _, h := range hs {
			if !h.Granted && (app == "" || h.ApplicationName == app) {
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "%q never waited for by %q", name, app)
}

// requireNoWaiters asserts that nobody waits for name on the server (pg_locks has no
// granted = false row for its key).
func requireNoWaiters(t testing.TB, m *advisory.Manager, name string) {
	t.Helper()
	hs, err := m.Holders(context.Background(), name)
	require.NoError(t, err)
	for _, h := range hs {
		require.True(t, h.Granted, "a waiter was left on the server: %+v", h)
	}
}

// requireHeldBy asserts that the session with pid holds name, and nobody else does.
func requireHeldBy(t testing.TB, m *advisory.Manager, name string, pid uint32) {
	t.Helper()
	hs, err := m.Holders(context.Background(), name)
	require.NoError(t, err)
	var holders []uint32
	for _, h := range hs {
		if h.Granted {
			holders = append(holders, h.PID)
		}
	}
	require.Equal(t, []uint32{pid}, holders)
}

// assertTerminalSafe asserts that s, printed for people, can do nothing to a terminal:
// valid UTF-8, no control character but the newline, no DEL, C1 or bidi control.
func assertTerminalSafe(t testing.TB, s string) {
	t.Helper()
	assert.True(t, utf8.ValidString(s), "invalid UTF-8 in %q", s)
	for _, r := range s {
		bad := (r < 0x20 && r != '\n') || (r >= 0x7f && r <= 0x9f) ||
			(r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
		if !assert.False(t, bad, "character %U in %q", r, s) {
			return
		}
	}
}
