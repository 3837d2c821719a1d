package pgtest_test

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// No Docker engine runs where these tests were written: the container step's success (a
// DSN from the helper, Restart, the container terminated when stdin closes) needs one and
// is not exercised here. These tests cover what a machine without one meets, and the
// helper's build, start and failure report.

// isolateDocker points the container step at a socket in dir: DOCKER_HOST, with a HOME of
// the test's own (no ~/.testcontainers.properties, whose tc.host would come first; the go
// command keeps its caches and settings), and TMPDIR at a directory of the test's own,
// which it returns.
func isolateDocker(t *testing.T, dir string) (tmp string) {
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH", "GOENV").Output()
	require.NoError(t, err)
	vals := strings.Split(strings.TrimSpace(string(out)), "\n")
	require.Len(t, vals, 4)
	for i, k := range []string{"GOCACHE", "GOMODCACHE", "GOPATH", "GOENV"} {
		t.Setenv(k, vals[i])
	}
	t.Setenv("HOME", t.TempDir())
	t.Setenv("DOCKER_HOST", "unix://"+filepath.Join(dir, "docker.sock"))
	tmp = t.TempDir()
	t.Setenv("TMPDIR", tmp)
	return tmp
}

// TestContainerStepWithoutDockerBuildsNothing: with no engine at DOCKER_HOST the step fails
// with that reason and builds nothing (the helper and testcontainers-go are compiled only
// when an engine answers; its build would land in TMPDIR).
func TestContainerStepWithoutDockerBuildsNothing(t *testing.T) {
	dir := t.TempDir()
	tmp := isolateDocker(t, dir)
	srv, err := pgtest.StartContainerForTest(context.Background())
	require.Nil(t, srv)
	require.ErrorContains(t, err, "no Docker engine answers at unix://"+filepath.Join(dir, "docker.sock"))
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, entries, "nothing built")
}

// TestContainerStepReportsTheHelpersFailure: an engine that answers GET /_ping and refuses
// everything else. The step builds the helper (module internal/pgtest/tc), runs it, and
// returns its failure, which names what the engine said; the binary is removed.
func TestContainerStepReportsTheHelpersFailure(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the helper and testcontainers-go (a minute the first time)")
	}
	dir := t.TempDir()
	tmp := isolateDocker(t, dir)
	ln, err := net.Listen("unix", filepath.Join(dir, "docker.sock"))
	require.NoError(t, err)
	pings := make(chan struct{}, 100)
	engine := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/_ping" {
			select {
			case pings <- struct{}{}:
			default:
			}
			fmt.Fprint(w, "OK")
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusInternalServerError)
		fmt.Fprint(w, `{"message":"a test engine that runs no containers"}`)
	})}
	go engine.Serve(ln)
	t.Cleanup(func() { engine.Close() })

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, startErr := pgtest.StartContainerForTest(ctx)
	if srv != nil {
		srv.Close()
	}
	require.Nil(t, srv)
	require.ErrorContains(t, startErr, "the helper exited")
	require.ErrorContains(t, startErr, "a test engine that runs no containers")
	require.NotEmpty(t, pings, "the engine was pinged")
	entries, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, entries, "the helper's binary is removed")
	t.Log(startErr)
}
