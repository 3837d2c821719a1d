package main_test

import (
	"context"
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestBinaryIsSlimAndStatic: the binary as it ships (CGO_ENABLED=0) links no container
// code and needs no dynamic loader, so it runs in a scratch or distroless image. The demo
// reaches Docker through the docker CLI instead.
func TestBinaryIsSlimAndStatic(t *testing.T) {
	t.Parallel()
	bin := staticBin // the package's binary, when TestMain built it as it ships
	if bin == "" {
		bin = filepath.Join(t.TempDir(), "pgadvisory")
		build := exec.Command("go", "build", "-o", bin, ".")
		build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS="+withoutRace(os.Getenv("GOFLAGS")))
		if out, err := build.CombinedOutput(); err != nil {
			t.Fatalf("static build: %v\n%s", err, out)
		}
	}
	out, err := exec.Command("go", "version", "-m", bin).Output()
	require.NoError(t, err)
	deps := 0
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 || (f[0] != "dep" && f[0] != "=>") {
			continue
		}
		deps++
		for _, bad := range []string{"testcontainers", "docker", "moby"} {
			assert.NotContains(t, strings.ToLower(f[1]), bad, "the pgadvisory binary links %s", f[1])
		}
	}
	assert.Less(t, deps, 15, "modules linked:\n%s", out)
	f, err := elf.Open(bin)
	require.NoError(t, err)
	defer f.Close()
	for _, p := range f.Progs {
		assert.NotEqual(t, elf.PT_INTERP, p.Type, "dynamically linked: it has a program interpreter")
	}
	libs, err := f.ImportedLibraries()
	require.NoError(t, err)
	assert.Empty(t, libs, "shared libraries needed")
	fi, err := os.Stat(bin)
	require.NoError(t, err)
	// 14.6 MB with Go 1.26 (10.1 MB with -ldflags="-s -w"); 19.9 MB when it linked
	// testcontainers. A guard against that regression, not a target.
	assert.Less(t, fi.Size(), int64(17<<20), "binary size")
}

// withoutRace drops -race from GOFLAGS: the race detector needs cgo, the shipped binary
// has none.
func withoutRace(goflags string) string {
	var keep []string
	for _, f := range strings.Fields(goflags) {
		if f != "-race" && f != "--race" {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, " ")
}

// fakeDocker is a docker CLI that logs its arguments to log: info answers (or fails, as
// with no engine, when FAKE_DOCKER_NOENGINE is set), run prints an id (or fails with
// FAKE_DOCKER_FAIL), port prints FAKE_DOCKER_ADDR, rm succeeds.
const fakeDocker = `#!/bin/sh
printf '%s\n' "$*" >> "$FAKE_DOCKER_LOG"
case "$1" in
info) if [ -n "$FAKE_DOCKER_NOENGINE" ]; then echo "Cannot connect to the Docker daemon" >&2; exit 1; fi; echo 27.0 ;;
run) if [ -n "$FAKE_DOCKER_FAIL" ]; then echo "$FAKE_DOCKER_FAIL" >&2; exit 125; fi; echo 4f9c2e1d ;;
port) echo "$FAKE_DOCKER_ADDR" ;;
esac
`

// TestDemoDockerCLI drives the demo's Docker path with a fake docker CLI (no Docker engine
// here) whose published port is a local server: the commands it runs, the DSN built from
// `docker port`, removal of the container on Ctrl-C, and the fallback to local binaries
// when docker run fails or no engine answers (then docker run is not tried, and its error
// is not shown). The three cases run in parallel, each demo with a log of its own.
func TestDemoDockerCLI(t *testing.T) {
	dsn(t) // skip or fail with the rest when there is no server
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	srv, err := pgtest.StartLocal(ctx, pgtest.Options{})
	pgtest.Need(t, srv, err)
	t.Cleanup(func() { srv.Close() })
	cfg, err := pgconn.ParseConfig(srv.DSN())
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "docker"), []byte(fakeDocker), 0o755))
	for _, tc := range []struct{ name, fail, noEngine, up string }{
		{"runs", "", "", "PostgreSQL is up (docker postgres:16-alpine, container pgadvisory-demo-"},
		{"fails", "docker: Cannot connect to the Docker daemon", "", "PostgreSQL is up (local binaries)"},
		{"no engine", "", "1", "PostgreSQL is up (local binaries)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			log := filepath.Join(t.TempDir(), "docker.log")
			p := startEnv(t, []string{"PATH=" + dir + string(os.PathListSeparator) + os.Getenv("PATH"),
				"ADVISORY_TEST_DSN=", "ADVISORY_TEST_PGBIN=", "FAKE_DOCKER_LOG=" + log, "FAKE_DOCKER_FAIL=" + tc.fail, "FAKE_DOCKER_NOENGINE=" + tc.noEngine,
				"FAKE_DOCKER_ADDR=" + cfg.Host + ":" + strconv.Itoa(int(cfg.Port))}, "demo")
			p.stdout.waitFor(t, tc.up, 60*time.Second)
			require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
			r := wait(t, p)
			assert.Equal(t, 130, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
			calls, err := os.ReadFile(log)
			require.NoError(t, err)
			lines := strings.Split(strings.TrimSpace(string(calls)), "\n")
			require.NotEmpty(t, lines)
			require.Equal(t, "info --format {{.ServerVersion}}", lines[0], "the engine is asked first")
			if tc.noEngine != "" {
				assert.Equal(t, lines[:1], lines, "no engine: docker run is not tried")
				assert.NotContains(t, r.stdout, "Cannot connect", "no engine: no docker error is shown")
				return
			}
			lines = lines[1:]
			run := strings.Fields(lines[0])
			require.GreaterOrEqual(t, len(run), 5, "%s", calls)
			name := run[4]
			assert.Equal(t, "run -d --rm --name "+name+" -p 127.0.0.1::5432 -e POSTGRES_HOST_AUTH_METHOD=trust postgres:16-alpine", lines[0])
			want := []string{lines[0], "port " + name + " 5432/tcp", "rm -f " + name}
			if tc.fail != "" {
				want = []string{lines[0], "rm -f " + name}
			}
			assert.Equal(t, want, lines)
		})
	}
}
