package pgtest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"
)

// The container step (see the package doc) runs testcontainers-go in a process of its own:
// the command of the module internal/pgtest/tc, which requires testcontainers-go so that
// the library's go.mod does not. A module that imports the library therefore records none
// of testcontainers-go, the Docker client and theirs in its go.sum.
//
// startContainer first asks whether a Docker engine answers (dockerAnswers); only then does
// it build the helper (go build in its module directory, into a temporary directory; Go's
// build cache makes later builds a relink) and run it. The helper prints "dsn ..." once the
// server is ready and stays alive until its stdin closes: [Server.Close] closes it, and so
// does the exit of the test binary, however it ends.

// helperStart bounds the helper's start: a first image pull is slow.
const helperStart = 5 * time.Minute

// helperBuild bounds the helper's build (and so does the caller's ctx): the first one
// compiles testcontainers-go and the Docker client (measured: 80 s of CPU, 6 min of wall
// time on two cores shared with other builds); later ones relink from Go's build cache,
// which also keeps the packages of a build cut short.
const helperBuild = 30 * time.Minute

// startContainer runs PostgreSQL in a container through the helper. Without a Docker
// engine it fails at once, before building anything.
func startContainer(ctx context.Context) (*Server, error) {
	if err := dockerAnswers(ctx); err != nil {
		return nil, err
	}
	dir, err := helperDir()
	if err != nil {
		return nil, err
	}
	h, err := startHelper(ctx, dir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, helperStart)
	defer cancel()
	dsn, err := h.answer(ctx)
	if err != nil {
		h.close()
		return nil, err
	}
	srv := &Server{dsn: dsn, kind: "testcontainers", stop: h.close}
	srv.restart = func(ctx context.Context) error {
		dsn, err := h.call(ctx, "restart")
		if err != nil {
			return err
		}
		srv.dsn = dsn // the mapped port may change across a restart
		return nil
	}
	return srv, nil
}

// helperDir returns the directory of the helper's module, beside this file in the source
// tree the test binary was built from (a clone, or a module replaced by one).
func helperDir() (string, error) {
	_, file, _, ok := runtime.Caller(0)
	dir := filepath.Join(filepath.Dir(file), "tc")
	if !ok || !filepath.IsAbs(file) {
		return "", errors.New("the source of internal/pgtest is not known here (built with -trimpath?)")
	}
	if _, err := os.Stat(filepath.Join(dir, "go.mod")); err != nil {
		return "", fmt.Errorf("the helper module is not in this copy of the library: %w", err)
	}
	return dir, nil
}

// helper is a running helper process.
type helper struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // its stdout, a line at a time; closed at EOF
	stderr bytes.Buffer
	tmp    string        // holds the binary
	done   chan struct{} // closed when the process has been waited for
}

// startHelper builds the helper from dir into a temporary directory (bounded by ctx and
// helperBuild) and starts it.
func startHelper(ctx context.Context, dir string) (*helper, error) {
	tmp, err := os.MkdirTemp("", "advisory-pgtest-tc-")
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(tmp, "tc")
	ctx, cancel := context.WithTimeout(ctx, helperBuild)
	defer cancel()
	build := exec.CommandContext(ctx, goTool(), "build", "-o", bin, ".")
	build.Dir = dir
	// The helper's module alone (no go.work), and none of the caller's flags (-race).
	build.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		os.RemoveAll(tmp)
		return nil, fmt.Errorf("building the helper in %s: %v: %s", dir, err, bytes.TrimSpace(out))
	}
	h := &helper{tmp: tmp, lines: make(chan string, 1), done: make(chan struct{})}
	h.cmd = exec.Command(bin)
	h.cmd.Stderr = &h.stderr
	if h.stdin, err = h.cmd.StdinPipe(); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	stdout, err := h.cmd.StdoutPipe()
	if err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	if err := h.cmd.Start(); err != nil {
		os.RemoveAll(tmp)
		return nil, err
	}
	go h.read(stdout)
	return h, nil
}

// goTool is the go command: from PATH, else the one of the toolchain that built this.
func goTool() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

// read feeds stdout's lines to h.lines, then waits for the process.
func (h *helper) read(stdout io.Reader) {
	in := bufio.NewScanner(stdout)
	for in.Scan() {
		h.lines <- in.Text()
	}
	close(h.lines)
	h.cmd.Wait()
	close(h.done)
}

// call sends one command and returns its answer. Calls must not overlap (Restart and
// Close do not run concurrently).
func (h *helper) call(ctx context.Context, cmd string) (string, error) {
	if _, err := io.WriteString(h.stdin, cmd+"\n"); err != nil {
		return "", fmt.Errorf("pgtest: container helper: %w", err)
	}
	return h.answer(ctx)
}

// answer reads the helper's next line: the DSN of "dsn ...", or the error of "error ..."
// or of its exit (with what it printed on stderr). When ctx ends first the helper is
// killed.
func (h *helper) answer(ctx context.Context) (string, error) {
	select {
	case line, ok := <-h.lines:
		if !ok {
			<-h.done
			return "", fmt.Errorf("the helper exited (%v): %s", h.cmd.ProcessState,
				strings.TrimSpace(h.stderr.String()))
		}
		if dsn, ok := strings.CutPrefix(line, "dsn "); ok {
			return dsn, nil
		}
		return "", fmt.Errorf("pgtest: container helper: %s", strings.TrimPrefix(line, "error "))
	case <-ctx.Done():
		h.cmd.Process.Kill()
		return "", fmt.Errorf("waiting for the container helper: %w", ctx.Err())
	}
}

// close closes the helper's stdin, which makes it terminate the container and exit, waits
// for that (at most a minute, then kills it), and removes the binary.
func (h *helper) close() error {
	h.stdin.Close()
	go func() {
		for range h.lines { // drain: read must reach EOF to wait for the process
		}
	}()
	var err error
	select {
	case <-h.done:
	case <-time.After(time.Minute):
		h.cmd.Process.Kill()
		<-h.done
		err = errors.New("pgtest: the container helper did not exit within a minute of its stdin closing; killed")
	}
	os.RemoveAll(h.tmp)
	return err
}
