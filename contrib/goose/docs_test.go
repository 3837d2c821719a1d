package advgoose_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDocsShowTheExample (issue 43, item 9): docs/migrations.md's goose snippet, between
// the goose-snippet markers, is the Example's code (which runs against a real server, and
// through a transaction pooler in TestExampleThroughAPooler), the migrations' name aside.
func TestDocsShowTheExample(t *testing.T) {
	b, err := os.ReadFile("../../docs/migrations.md")
	require.NoError(t, err)
	s := string(b)
	i, j := strings.Index(s, "<!-- goose-snippet"), strings.Index(s, "<!-- /goose-snippet -->")
	require.True(t, i >= 0 && j > i, "docs/migrations.md has the goose-snippet markers")
	example, err := os.ReadFile("example_test.go")
	require.NoError(t, err)
	ex := strings.ReplaceAll(string(example), "exampleMigrations", "migrations")
	for _, line := range strings.Split(s[i:j], "\n")[1:] {
		code, _, _ := strings.Cut(line, "//")
		code = strings.TrimSpace(code)
		if code == "" || code == "import (" || code == ")" || code == "```go" || code == "```" {
			continue
		}
		assert.Contains(t, ex, code, "the snippet's line is the Example's")
	}
	assert.Contains(t, s[i:j], "advgoose.OpenDB(m, dsn)")
}
