package advisory_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNamesakeFiles (issue 37, item 10): a newcomer opens the package's namesake file
// first, and it holds the Manager and New; key hashing is in keyhash.go, as the filing
// table of CONTRIBUTING.md says.
func TestNamesakeFiles(t *testing.T) {
	t.Parallel()
	want := map[string]string{"Manager": "advisory.go", "New": "advisory.go", "NewWithConfig": "advisory.go",
		"Key": "keyhash.go", "KeyOf": "keyhash.go", "ValidateName": "keyhash.go"}
	fset := token.NewFileSet()
	pkgs, err := parser.ParseDir(fset, ".", nil, parser.SkipObjectResolution)
	require.NoError(t, err)
	got := map[string]string{}
	for name, f := range pkgs["advisory"].Files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					got[d.Name.Name] = name
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					if ts, ok := s.(*ast.TypeSpec); ok {
						got[ts.Name.Name] = name
					}
				}
			}
		}
	}
	for ident, file := range want {
		assert.Equal(t, file, got[ident], "the file that declares %s", ident)
	}
}

// TestFilingTableListsEveryRootFile: CONTRIBUTING.md's filing table is the map of the
// root package; a file missing from it is a room the map does not show (issue 45).
func TestFilingTableListsEveryRootFile(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("CONTRIBUTING.md")
	require.NoError(t, err)
	files, err := filepath.Glob("*.go")
	require.NoError(t, err)
	root := map[string]bool{}
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			root[f] = true
			assert.Contains(t, string(doc), "`"+f+"`", "CONTRIBUTING.md's filing table does not list %s", f)
		}
	}
	// And no row names a root file that is gone: a map that shows a room no longer there
	// is as wrong as one that misses a room.
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(line, "|") { // the table's rows only
			continue
		}
		for _, m := range rootFileRef.FindAllStringSubmatch(line, -1) {
			if !strings.HasSuffix(m[1], "_test.go") && !strings.Contains(m[1], "*") {
				assert.True(t, root[m[1]], "CONTRIBUTING.md's filing table names %s, which is not a root file", m[1])
			}
		}
	}
}

// rootFileRef matches a root file named in backquotes: `name.go`, with no directory.
var rootFileRef = regexp.MustCompile("`([a-z0-9_*]+\\.go)`")
