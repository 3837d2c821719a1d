package usermodule_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/advisorytest"
)

// adapters are the contrib modules, by directory, with what their program prints.
var adapters = map[string]string{
	"goose":      "schema at version 1\n",
	"migrate":    "migrated\n",
	"gocron":     "report written\n",
	"robfigcron": "report written\n",
	"otel":       "locked and unlocked, measured\n",
}

// TestRecipeFromAClone: the README's recipe, run as a user runs it. A fresh module in a
// temporary directory (outside the repository) gets the README's `go mod edit` lines,
// with the clone's path for /src/advisory, for the library and for each adapter; then
// `go mod tidy`, `go vet`, and each program of testdata (the README's quick start, each
// adapter's Example) is built and run against a database of its own.
func TestRecipeFromAClone(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	lib, adapter, after := recipe(t, root)
	dir := t.TempDir()
	goCmd(t, dir, "mod", "init", "example.com/app")
	run(t, dir, "sh", "-c", lib)
	for a := range adapters {
		run(t, dir, "sh", "-c", strings.ReplaceAll(adapter, "contrib/migrate", "contrib/"+a))
	}
	require.NoError(t, os.CopyFS(filepath.Join(dir, "cmd"), os.DirFS("testdata")))
	require.NoError(t, os.Rename(filepath.Join(dir, "cmd", "migrate", "migrations"), filepath.Join(dir, "migrations")))
	for _, cmd := range after { // the README's go mod tidy, once the code is there
		run(t, dir, "sh", "-c", cmd)
	}
	goCmd(t, dir, "vet", "./...")
	for prog, want := range adapters {
		t.Run(prog, func(t *testing.T) { runProgram(t, dir, prog, want) })
	}
	t.Run("library", func(t *testing.T) { runProgram(t, dir, "library", "migrated\n") })
}

// recipe returns the README's `go mod edit` lines for the library and for an adapter
// (golang-migrate's, the README's example of one), with root for /src/advisory, and the
// commands after them, which the README runs once the code that imports the packages is
// written (a go mod tidy before it would drop every require the edits added).
func recipe(t *testing.T, root string) (lib, adapter string, after []string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	block := regexp.MustCompile("(?s)<!-- clone-recipe -->\n```sh\n(.*?)```").FindSubmatch(b)
	require.NotNil(t, block, "the README's clone-recipe block")
	var edits []string
	codeWritten := false
	for _, line := range strings.Split(strings.ReplaceAll(string(block[1]), "\\\n", ""), "\n") {
		cmd, comment, _ := strings.Cut(line, "#")
		cmd = strings.TrimSpace(cmd)
		switch {
		case strings.HasPrefix(cmd, "go mod edit"):
			require.False(t, codeWritten, "a go mod edit line after the code: %q", line)
			edits = append(edits, strings.ReplaceAll(cmd, "/src/advisory", root))
		case cmd == "" && len(edits) == 2 && strings.Contains(comment, "write the code"):
			codeWritten = true
		case cmd != "" && len(edits) > 0:
			require.True(t, codeWritten, "%q runs before the code that imports the packages is written", line)
			after = append(after, cmd)
		}
	}
	require.Len(t, edits, 2, "a line for the library, one for an adapter: %q", block[1])
	require.Contains(t, edits[1], "contrib/migrate")
	require.Equal(t, []string{"go mod tidy"}, after, "the README's commands once the code is written")
	return edits[0], edits[1], after
}

// runProgram builds and runs ./cmd/prog of the module in dir with a database of its own,
// and checks what it prints.
func runProgram(t *testing.T, dir, prog, want string) {
	bin := filepath.Join(t.TempDir(), prog)
	goCmd(t, dir, "build", "-o", bin, "./cmd/"+prog)
	cmd := exec.Command(bin)
	cmd.Dir = dir // the migrate program reads file://migrations
	cmd.Env = append(os.Environ(), "DATABASE_URL="+advisorytest.DSN(t))
	start := time.Now()
	out, err := cmd.Output()
	var stderr []byte
	if ee, ok := err.(*exec.ExitError); ok {
		stderr = ee.Stderr
	}
	require.NoError(t, err, "%s: %s", prog, stderr)
	assert.Equal(t, want, string(out))
	t.Logf("%s ran in %v", prog, time.Since(start).Round(time.Millisecond))
}

func goCmd(t *testing.T, dir string, args ...string) {
	t.Helper()
	run(t, dir, "go", args...)
}

func run(t *testing.T, dir, name string, args ...string) {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s %q: %s", name, args, out)
}

// linkedWithPgxOnly are the modules a program that imports only the library links.
var linkedWithPgxOnly = []string{"github.com/jackc/pgpassfile", "github.com/jackc/pgservicefile",
	"github.com/jackc/pgx/v5", "github.com/jackc/puddle/v2", "github.com/pgadvisory/advisory",
	"golang.org/x/sync", "golang.org/x/text"}

// TestWhatAUserModuleGets: what the README says a module that uses only the library gets.
// Its program links pgx/v5 and pgx's own dependencies, nothing else; and `go mod tidy`,
// which also records the checksums of the test dependencies of the packages a module
// imports, records nothing beyond what it records for a module that uses pgx and testify
// (at the versions the library requires): none of testcontainers-go, moby or docker, which
// the harness's container step keeps in a module of its own (internal/pgtest/tc). The
// counts are logged.
func TestWhatAUserModuleGets(t *testing.T) {
	root, err := filepath.Abs("../..")
	require.NoError(t, err)
	lib, _, _ := recipe(t, root)
	dir := t.TempDir()
	goCmd(t, dir, "mod", "init", "example.com/app")
	run(t, dir, "sh", "-c", lib)
	require.NoError(t, os.CopyFS(filepath.Join(dir, "cmd"), os.DirFS("testdata/library")))
	goCmd(t, dir, "mod", "tidy")
	bin := filepath.Join(dir, "app")
	goCmd(t, dir, "build", "-o", bin, "./cmd")
	out, err := exec.Command("go", "version", "-m", bin).Output()
	require.NoError(t, err)
	var linked []string
	for _, l := range strings.Split(string(out), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "dep" {
			linked = append(linked, f[1])
		}
	}
	assert.ElementsMatch(t, linkedWithPgxOnly, linked, "the modules the program links")
	sum := goSum(t, dir)
	for line := range sum {
		for _, bad := range []string{"testcontainers", "moby", "docker", "containerd"} {
			assert.NotContains(t, line, bad, "the user's go.sum")
		}
	}
	pgxSum := goSum(t, pgxAndTestifyModule(t, root))
	var beyond []string
	for line := range sum {
		if !pgxSum[line] {
			beyond = append(beyond, line)
		}
	}
	assert.Empty(t, beyond, "go.sum lines a module using pgx and testify does not get")
	t.Logf("go.sum: %d lines, %d modules (a module using pgx and testify: %d lines, %d modules); "+
		"the program links %d modules", len(sum), len(sumModules(sum)), len(pgxSum), len(sumModules(pgxSum)), len(linked))
}

// pgxAndTestifyModule makes and tidies a module whose program uses pgxpool and whose test
// uses testify, both at the versions the library's go.mod (in root) requires; it returns
// its directory.
func pgxAndTestifyModule(t *testing.T, root string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(root, "go.mod"))
	require.NoError(t, err)
	dir := t.TempDir()
	goCmd(t, dir, "mod", "init", "example.com/pgxapp")
	for _, mod := range []string{"github.com/jackc/pgx/v5", "github.com/stretchr/testify"} {
		m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(mod) + ` (v\S+)`).FindSubmatch(b)
		require.NotNil(t, m, "the library requires %s", mod)
		goCmd(t, dir, "mod", "edit", "-require="+mod+"@"+string(m[1]))
	}
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(pgxMain), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main_test.go"), []byte(testifyTest), 0o644))
	goCmd(t, dir, "mod", "tidy")
	return dir
}

const pgxMain = `package main

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
)

func main() {
	pool, err := pgxpool.New(context.Background(), "")
	if err == nil {
		pool.Close()
	}
}
`

const testifyTest = `package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestNothing(t *testing.T) { assert.True(t, true) }
`

// goSum returns the lines of the go.sum in dir.
func goSum(t *testing.T, dir string) map[string]bool {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "go.sum"))
	require.NoError(t, err)
	lines := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		lines[l] = true
	}
	return lines
}

// sumModules returns the module paths of go.sum lines.
func sumModules(sum map[string]bool) map[string]bool {
	modules := map[string]bool{}
	for l := range sum {
		modules[strings.Fields(l)[0]] = true
	}
	return modules
}
