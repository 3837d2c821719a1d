package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestRenderReproducesTheDocs: docs/benchmarks.md and the README's figures block are
// what `go run . -render` writes from the committed docs/benchmarks.json and
// docs/benchmarks-fleet.json, byte for byte. A note typed into the doc rather than into
// the generator's notes (bench/*notes*.go) fails here, instead of being lost at the next
// run. It renders into a temporary directory (plots included) and needs no server.
func TestRenderReproducesTheDocs(t *testing.T) {
	dir := t.TempDir()
	for _, name := range []string{"benchmarks.json", "benchmarks-fleet.json"} {
		copyFile(t, filepath.Join("..", "docs", name), filepath.Join(dir, name))
	}
	_, ok := loadFleet(dir)
	require.True(t, ok, "docs/benchmarks-fleet.json must load, or its sections would be left out")
	readme := filepath.Join(dir, "README.md")
	copyFile(t, filepath.Join("..", "README.md"), readme)

	require.NoError(t, renderFrom(dir, readme))

	for _, c := range []struct{ committed, rendered string }{
		{filepath.Join("..", "docs", "benchmarks.md"), filepath.Join(dir, "benchmarks.md")},
		{filepath.Join("..", "README.md"), readme},
	} {
		want, err := os.ReadFile(c.committed)
		require.NoError(t, err)
		got, err := os.ReadFile(c.rendered)
		require.NoError(t, err)
		if string(got) != string(want) {
			t.Errorf("%s is not what `cd bench && go run . -render` writes: put hand-written text in "+
				"bench/*notes*.go, then render\n%s", c.committed, firstDifference(string(want), string(got), 6))
		}
	}
}

// firstDifference shows where two texts part: the first differing line's number, then
// up to n lines from there of each, the committed ("-") before the rendered ("+").
func firstDifference(committed, rendered string, n int) string {
	a, b := strings.Split(committed, "\n"), strings.Split(rendered, "\n")
	i := 0
	for i < len(a) && i < len(b) && a[i] == b[i] {
		i++
	}
	var s strings.Builder
	fmt.Fprintf(&s, "first difference at line %d (committed %d lines, rendered %d):\n", i+1, len(a), len(b))
	for _, side := range []struct {
		mark  string
		lines []string
	}{{"-", a}, {"+", b}} {
		for _, l := range side.lines[i:min(i+n, len(side.lines))] {
			s.WriteString(side.mark + " " + l + "\n")
		}
	}
	return s.String()
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(to, b, 0o644))
}
