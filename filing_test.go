package advisory_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
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
	for _, f := range files {
		if !strings.HasSuffix(f, "_test.go") {
			assert.Contains(t, string(doc), "`"+f+"`", "CONTRIBUTING.md's filing table does not list %s", f)
		}
	}
}
