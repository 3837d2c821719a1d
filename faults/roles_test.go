package faults_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// runRole runs this binary as a helper process and returns its exit code.
func runRole(role string) int {
	switch role {
	case "holder":
		return runHolder()
	case "chaos":
		return runChaosWorker()
	case "stale":
		return runStaleHolder()
	case "partwork":
		return runPartitionedHolder()
	case "poolhold":
		return runPoolHolder()
	case "sharedhold":
		return runSharedHolder()
	}
	fmt.Fprintf(os.Stderr, "unknown role %q\n", role)
	return 2
}

// profiles are the keepalive settings a holder process can be asked to use.
var profiles = map[string][]advisory.Option{
	"default": nil,
	// Told within 3 s of a partition; the server frees the lock no sooner than 6 s after.
	"tight": {
		advisory.WithClientKeepalive(advisory.TCPKeepalive{Idle: time.Second, Interval: time.Second, Count: 2}),
		advisory.WithServerKeepalive(advisory.TCPKeepalive{Idle: 2 * time.Second, Interval: time.Second, Count: 6}),
		advisory.WithMinMargin(2 * time.Second),
	},
}

// runHolder takes one lock, prints "LOCKED <backend pid>", then waits for the lock to end
// and prints "LOST <error>" the moment Done closes.
func runHolder() int {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("ADVISORY_FAULT_DSN"), profiles[os.Getenv("ADVISORY_FAULT_PROFILE")]...)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	l, err := m.Lock(ctx, os.Getenv("ADVISORY_FAULT_KEY"))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	fmt.Println("LOCKED", l.PID())
	<-l.Done()
	fmt.Println("LOST", l.Err())
	return 0
}

// helper is a running helper process; lines delivers its stdout lines with the time
// each arrived, and stdin is the write end of its standard input.
type helper struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan line
	exit  chan struct{}
}

type line struct {
	text string
	at   time.Time
}

// startHelper starts this test binary in role with env, under the prefix command if any
// (e.g. ip netns exec NS). It is killed when the test ends.
func startHelper(t testing.TB, role string, env map[string]string, prefix ...string) *helper {
	t.Helper()
	args := append(append([]string{}, prefix...), os.Args[0], "-test.run=^$")
	cmd := exec.Command(args[0], args[1:]...)
	cmd.Env = append(os.Environ(), roleEnv+"="+role)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	h := &helper{cmd: cmd, stdin: in, lines: make(chan line, 1024), exit: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			h.lines <- line{sc.Text(), time.Now()}
		}
		close(h.lines)
		cmd.Wait()
		close(h.exit)
	}()
	t.Cleanup(h.kill)
	return h
}

// expect waits for a line starting with prefix and returns it.
func (h *helper) expect(t testing.TB, prefix string, timeout time.Duration) line {
	t.Helper()
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-h.lines:
			if !ok {
				t.Fatalf("helper exited before printing %q", prefix)
			}
			if strings.HasPrefix(l.text, prefix) {
				return l
			}
			if strings.HasPrefix(l.text, "ERROR") {
				t.Fatalf("helper: %s", l.text)
			}
			if strings.HasPrefix(l.text, "UNEXPECTED") {
				t.Logf("helper: %s", l.text)
			}
		case <-deadline:
			t.Fatalf("helper did not print %q within %v", prefix, timeout)
		}
	}
}

// kill SIGKILLs the helper's process group and waits for it. Its lines are drained, not
// read: a helper that printed more than the channel holds after the test stopped reading
// would otherwise keep the reader blocked on the channel, short of reaping the process.
func (h *helper) kill() {
	syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	go func() {
		for range h.lines {
		}
	}()
	<-h.exit
}
