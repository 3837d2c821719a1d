package advisory_test

import (
	"bufio"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// maxFuncLines is the longest a function of the root package may be (issue 45).
const maxFuncLines = 60

// TestNoLongFunctions (issue 45): no function of the root package's non-test code is
// over maxFuncLines lines, from its func keyword to its closing brace.
func TestNoLongFunctions(t *testing.T) {
	t.Parallel()
	for _, fn := range rootFuncs(t) {
		assert.LessOrEqual(t, fn.end-fn.start+1, maxFuncLines, "%s:%d %s", fn.file, fn.start, fn.name)
	}
}

// A rootFunc is one function declaration of the root package's non-test code.
type rootFunc struct {
	file, name string
	start, end int // lines
}

// rootFuncs parses the root package's non-test files.
func rootFuncs(t *testing.T) []rootFunc {
	t.Helper()
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	fset := token.NewFileSet()
	var fns []rootFunc
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range f.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				fns = append(fns, rootFunc{name, funcName(fd), fset.Position(fd.Type.Pos()).Line, fset.Position(fd.End()).Line})
			}
		}
	}
	return fns
}

func funcName(fd *ast.FuncDecl) string {
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	typ := fd.Recv.List[0].Type
	if st, ok := typ.(*ast.StarExpr); ok {
		typ = st.X
	}
	if id, ok := typ.(*ast.Ident); ok {
		return id.Name + "." + fd.Name.Name
	}
	return fd.Name.Name
}

// routeTrials is how many single calls TestPlainRoute traces: a function counts as on
// the route only if every trial ran it, so that a background tick (the pool's health
// check) that happens to fall inside one trace is not counted.
const routeTrials = 3

// TestPlainRoute (issue 45): one plain Lock (default options, a direct connection, warm)
// and its Unlock run no code of a feature that is off. It builds testdata/routetrace
// with coverage, runs it on the test server, and counts the root files and functions
// the calls ran. The bounds are what the plain route measured once the features' code
// left it (issue 45; it was 21 and 17 files before), the targets: they may only
// go down (the Lock's went from 12 to 11 when issue 47 removed the loss armer).
func TestPlainRoute(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the package with coverage (a minute or more): not under -short")
	}
	dsn := dsn(t) // without a server: skipped, or failed under CI
	dir := t.TempDir()
	bin := filepath.Join(dir, "routetrace")
	// Without -coverpkg: the main package must be covered too for runtime/coverage to
	// work; every package of the module is, and only the root package's files count.
	out, err := exec.Command("go", "build", "-cover", "-covermode=atomic", "-o", bin, "./testdata/routetrace").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(bin, dsn, dir, strconv.Itoa(routeTrials)).CombinedOutput()
	require.NoError(t, err, "%s", out)
	fns := rootFuncs(t)
	for _, c := range []struct {
		call     string
		maxFiles int
	}{{"lock", 11}, {"unlock", 8}} {
		var ran map[string]bool
		for i := 0; i < routeTrials; i++ {
			got := tracedFuncs(t, filepath.Join(dir, fmt.Sprintf("%s-%d", c.call, i)), fns)
			for f := range ran {
				if !got[f] {
					delete(ran, f)
				}
			}
			if ran == nil {
				ran = got
			}
		}
		files, list := routeSummary(ran)
		t.Logf("a plain %s runs %d root files, %d functions:\n%s", c.call, len(files), len(ran), list)
		assert.LessOrEqual(t, len(files), c.maxFiles, "root files a plain %s runs", c.call)
	}
}

// routeSummary returns the files of the traced functions, and a listing of them.
func routeSummary(ran map[string]bool) (map[string]bool, string) {
	files := map[string]bool{}
	var names []string
	for f := range ran {
		files[strings.SplitN(f, " ", 2)[0]] = true
		names = append(names, f)
	}
	sort.Strings(names)
	return files, "  " + strings.Join(names, "\n  ")
}

// tracedFuncs converts the counters in dir to text and returns the root functions
// ("file.go Recv.Name") with a block that ran.
func tracedFuncs(t *testing.T, dir string, fns []rootFunc) map[string]bool {
	t.Helper()
	txt := filepath.Join(dir, "profile.txt")
	out, err := exec.Command("go", "tool", "covdata", "textfmt", "-i="+dir, "-o="+txt).CombinedOutput()
	require.NoError(t, err, "%s", out)
	f, err := os.Open(txt)
	require.NoError(t, err)
	defer f.Close()
	const prefix = "github.com/pgadvisory/advisory/"
	ran := map[string]bool{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// github.com/pgadvisory/advisory/lock.go:30.25,32.2 1 5
		line, ok := strings.CutPrefix(sc.Text(), prefix)
		fields := strings.Fields(line)
		if !ok || strings.Contains(fields[0], "/") || len(fields) != 3 || fields[2] == "0" {
			continue
		}
		file, pos, _ := strings.Cut(fields[0], ":")
		from, _, _ := strings.Cut(pos, ".")
		n, err := strconv.Atoi(from)
		require.NoError(t, err)
		for _, fn := range fns {
			if fn.file == file && fn.start <= n && n <= fn.end {
				ran[fn.file+" "+fn.name] = true
			}
		}
	}
	require.NoError(t, sc.Err())
	return ran
}
