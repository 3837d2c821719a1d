package advmigrate_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDocsShowTheExample (issue 37, item 10): README.md and docs/migrations.md showed
// different snippets, both without WithRecoverDirty. They show one snippet, between the
// migrate-snippet markers, and its statements are the Example's (which runs against a
// real server), the migrations' path aside.
func TestDocsShowTheExample(t *testing.T) {
	t.Parallel()
	readme, docs := snippet(t, "../../README.md"), snippet(t, "../../docs/migrations.md")
	require.Equal(t, docs, readme, "README.md and docs/migrations.md show the same snippet")
	example, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	ex := strings.ReplaceAll(string(example), "testdata/example", "migrations")
	for _, line := range strings.Split(readme, "\n") {
		code, _, _ := strings.Cut(line, "//")
		code = strings.TrimSpace(code)
		if code == "" || code == "import (" || code == ")" || code == "```go" || code == "```" {
			continue
		}
		assert.Contains(t, ex, code, "the snippet's line is the Example's")
	}
	assert.Contains(t, readme, "advmigrate.WithRecoverDirty(src)")
}

// snippet returns the lines between the migrate-snippet markers of the file at path,
// without their indentation (the README's is inside a list item).
func snippet(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := string(b)
	i := strings.Index(s, "<!-- migrate-snippet")
	j := strings.Index(s, "<!-- /migrate-snippet -->")
	require.True(t, i >= 0 && j > i, "%s has the migrate-snippet markers", path)
	lines := strings.Split(s[i:j], "\n")[1:]
	for k, l := range lines {
		lines[k] = strings.TrimPrefix(l, "  ")
	}
	return strings.TrimSpace(strings.Join(lines, "\n"))
}
