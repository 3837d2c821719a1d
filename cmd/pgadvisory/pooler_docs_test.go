package main_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestNoHelpOrDocSaysATransactionPoolerIsRefused (issue 43, item 12): run, status and
// break work behind a transaction pooler (TestRunThroughATransactionPooler), so neither a
// command's --help nor the docs that list the CLI's exit codes say it exits 69 there;
// only a statement pooler is refused.
func TestNoHelpOrDocSaysATransactionPoolerIsRefused(t *testing.T) {
	t.Parallel()
	stale := []string{"a transaction pooler or a standby fail at once", "a transaction-pooling proxy |",
		"a transaction-pooling proxy, a hot standby", "through the library's connection, which refuses such a proxy",
		"through the library's connection, which refuses the proxy"}
	for _, cmd := range []string{"run", "status", "break"} {
		r := noDB(t, cmd, "--help")
		require.Equal(t, 0, r.code, r.stderr)
		for _, s := range stale {
			assert.NotContains(t, r.stdout, s, "%s --help", cmd)
		}
		assert.Contains(t, r.stdout, "statement", "%s --help names the pooler that is refused", cmd)
	}
	for _, doc := range []string{"README.md", "docs/operations.md", "docs/migrations.md", "docs/guarantees.md", "docs/run.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", doc))
		require.NoError(t, err)
		text := strings.Join(strings.Fields(string(b)), " ")
		for _, s := range stale {
			assert.False(t, strings.Contains(text, s), "%s still says %q", doc, s)
		}
	}
}
