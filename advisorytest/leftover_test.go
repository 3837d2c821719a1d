package advisorytest_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/advisorytest"
	"github.com/pgadvisory/advisory/internal/pglocal"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// helperEnv selects what TestHelperProcess does in a subprocess of this test binary.
const helperEnv = "ADVISORYTEST_HELPER"

// TestHelperProcess is a user's test in a test binary without TestMain: it gets a DSN,
// takes a lock, prints the server's data directory, then ends ("exit") or waits to be
// killed ("kill"). It does nothing in a normal run.
func TestHelperProcess(t *testing.T) {
	mode := os.Getenv(helperEnv)
	if mode == "" {
		t.Skip("runs only as a subprocess of TestNothingLeftBehind and TestNoServer")
	}
	dsn := advisorytest.DSN(t)
	conn, err := pgx.Connect(t.Context(), dsn)
	require.NoError(t, err)
	var dir string
	require.NoError(t, conn.QueryRow(t.Context(),
		"SELECT current_setting('data_directory') FROM (SELECT pg_advisory_lock(1)) l").Scan(&dir))
	fmt.Printf("DATADIR=%s\n", dir)
	var db string
	require.NoError(t, conn.QueryRow(t.Context(), "SELECT current_database()").Scan(&db))
	fmt.Printf("DATABASE=%s\n", db)
	if mode == "kill" {
		time.Sleep(time.Hour)
	}
}

// TestNothingLeftBehind runs a test binary that uses a local cluster and has no TestMain,
// lets it exit normally or SIGKILLs it, and checks that no process of the cluster (the
// postmaster, its backends, the watchdog) and no file of it stays behind.
func TestNothingLeftBehind(t *testing.T) {
	bin, err := pglocal.FindBinaries()
	if err != nil && (!pgtest.InCI() || dockerSocket()) {
		// Under CI with a Docker engine the harness needs no local binaries (.ci/run
		// installs them only when neither a DSN nor Docker is there).
		t.Skipf("needs the local PostgreSQL binaries: %v", err)
	}
	require.NoError(t, err)
	for _, mode := range []string{"exit", "kill"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			cmd, dataDir := startHelper(t, mode, bin)
			if mode == "kill" {
				require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
			}
			cmd.Wait()
			requireGone(t, filepath.Dir(dataDir))
		})
	}
}

// startHelper runs TestHelperProcess in mode on a local cluster from bin and returns once
// it has printed the cluster's data directory.
func startHelper(t *testing.T, mode, bin string) (*exec.Cmd, string) {
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"="+mode, pgtest.EnvDSN+"=", pgtest.EnvPGBin+"="+bin)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill() })
	lines := bufio.NewScanner(out)
	for lines.Scan() {
		if dir, ok := strings.CutPrefix(lines.Text(), "DATADIR="); ok {
			go func() { // drain, so the helper never blocks on a full pipe
				for lines.Scan() {
				}
			}()
			return cmd, dir
		}
	}
	t.Fatalf("the helper printed no DATADIR (%v)", cmd.Wait())
	return nil, ""
}

// requireGone waits (up to 30 s) until dir does not exist and no process runs in it or
// names it on its command line.
func requireGone(t *testing.T, dir string) {
	t.Helper()
	require.True(t, strings.HasPrefix(dir, pglocal.TempRoot()+"/pgt"), "unexpected cluster directory %s", dir)
	var left []string
	require.Eventually(t, func() bool {
		left = processesUsing(dir)
		_, err := os.Stat(dir)
		if err == nil {
			left = append(left, "directory "+dir)
		}
		return len(left) == 0
	}, 30*time.Second, 20*time.Millisecond, "left behind: %v", &left)
}

// processesUsing lists the processes whose working directory is under dir or whose
// command line contains dir.
func processesUsing(dir string) []string {
	var found []string
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cwd, _ := os.Readlink(p + "/cwd")
		cmdline, _ := os.ReadFile(p + "/cmdline")
		if strings.HasPrefix(cwd, dir) || strings.Contains(string(cmdline), dir) {
			found = append(found, fmt.Sprintf("%s (%s)", p, strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return found
}

// TestNoServer: without any server DSN skips the test with the reasons, and fails it
// under CI=true.
func TestNoServer(t *testing.T) {
	t.Parallel()
	for _, ci := range []string{"false", "true"} {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
		cmd.Env = append(os.Environ(), helperEnv+"=exit", "CI="+ci, pgtest.EnvDSN+"=",
			pgtest.EnvPGBin+"=/nonexistent-pgbin")
		out, err := cmd.CombinedOutput()
		assert.Contains(t, string(out), "no PostgreSQL", "CI=%s", ci)
		assert.Contains(t, string(out), "/nonexistent-pgbin", "the reason is given")
		if ci == "true" {
			assert.Error(t, err, "CI=true: a failure\n%s", out)
			assert.Contains(t, string(out), "--- FAIL: TestHelperProcess")
		} else {
			assert.NoError(t, err, "%s", out)
			assert.Contains(t, string(out), "--- SKIP: TestHelperProcess")
		}
	}
}

func dockerSocket() bool {
	_, err := os.Stat("/var/run/docker.sock")
	return err == nil || os.Getenv("DOCKER_HOST") != ""
}
