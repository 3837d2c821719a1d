package migrations_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
)

// envPgadvisory names a pgadvisory binary to test instead of the one the tests build from
// this tree: an older build, to measure what the fix changed (see README.md).
const envPgadvisory = "E2E_PGADVISORY"

// Build tags that leave every driver but PostgreSQL's out of the two CLIs.
const (
	migrateTags = "postgres pgx5" // lib/pq as postgres://, pgx v5 as pgx5://; the file source is always in
	gooseTags   = "no_clickhouse no_libsql no_mssql no_mysql no_sqlite3 no_vertica no_ydb"
)

// tools are the programs the tests run: the migrate and goose CLIs built from this
// module's requirements (versions pinned by go.sum), pgadvisory built from this tree, and
// the psql found on this machine ("" if none).
type tools struct {
	migrate, goose, pgadvisory, psql string
}

var buildTools = sync.OnceValues(func() (*tools, error) {
	var tl tools
	var err error
	if tl.migrate, err = goBuild(".", "migrate", migrateTags, "github.com/golang-migrate/migrate/v4/cmd/migrate"); err != nil {
		return nil, err
	}
	if tl.goose, err = goBuild(".", "goose", gooseTags, "github.com/pressly/goose/v3/cmd/goose"); err != nil {
		return nil, err
	}
	if tl.pgadvisory = os.Getenv(envPgadvisory); tl.pgadvisory == "" {
		if tl.pgadvisory, err = goBuild("../..", "pgadvisory", "", "./cmd/pgadvisory"); err != nil {
			return nil, err
		}
	}
	tl.psql = findPsql()
	return &tl, nil
})

// needTools builds the tools once per test binary (the Go build cache makes later runs
// quick) or fails the test.
func needTools(t testing.TB) *tools {
	t.Helper()
	server(t)
	tl, err := buildTools()
	if err != nil {
		t.Fatalf("building the tools: %v", err)
	}
	return tl
}

// goBuild builds pkg into toolDir/name, from dir (a module root), with the build tags
// given. The race detector is left out even when GOFLAGS asks for it: these are the
// programs under test's tools, not the code under test.
func goBuild(dir, name, tags, pkg string) (string, error) {
	out := filepath.Join(toolDir, name)
	args := []string{"build", "-o", out}
	if tags != "" {
		args = append(args, "-tags", tags)
	}
	cmd := exec.Command(goCommand(), append(args, pkg)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS="+withoutRace(os.Getenv("GOFLAGS")))
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, b)
	}
	return out, nil
}

func goCommand() string {
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	return filepath.Join(runtime.GOROOT(), "bin", "go")
}

func withoutRace(goflags string) string {
	var keep []string
	for _, f := range strings.Fields(goflags) {
		if f != "-race" {
			keep = append(keep, f)
		}
	}
	return strings.Join(keep, " ")
}

// findPsql returns psql from PATH, else from the newest Debian /usr/lib/postgresql/N/bin,
// else "".
func findPsql() string {
	if p, err := exec.LookPath("psql"); err == nil {
		return p
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin/psql")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, p := range dirs {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			return p
		}
	}
	return ""
}

func versionOf(psqlPath string) int {
	var n int
	fmt.Sscanf(filepath.Base(filepath.Dir(filepath.Dir(psqlPath))), "%d", &n)
	return n
}
