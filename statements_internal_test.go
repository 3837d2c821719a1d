package advisory

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzNameComment: whatever the name, the comment cannot end early or nest, and it reads
// back as the same name.
func FuzzNameComment(f *testing.F) {
	for _, s := range []string{"migrations", "*/ DROP TABLE x; /*", "/*", "*/", "a*//*b", `\*/`, "日本", "\n--", "'\""} {
		f.Add(s)
	}
	f.Add(strings.Repeat("x", 4096))
	f.Add(strings.Repeat("日", 1000))
	f.Add(strings.Repeat("x", 797) + "日本")
	f.Fuzz(func(t *testing.T, name string) {
		c := nameComment(name)
		require.True(t, strings.HasPrefix(c, "/*") && strings.HasSuffix(c, " */ "))
		inner := c[2 : len(c)-4]
		assert.NotContains(t, inner, "*/", "the comment ends only where it should")
		assert.NotContains(t, inner, "/*", "no nested comment")
		assert.NotContains(t, c, "\n")
		require.LessOrEqual(t, len(c), len(commentPrefix+truncatedMark)+maxCommentName+4,
			"the comment fits in the server's kept statement text")
		got, prefix, ok := nameFromQuery(c + "SELECT 1")
		require.True(t, ok)
		if prefix {
			assert.True(t, strings.HasPrefix(name, got), "a recorded start is the name's start")
			assert.Greater(t, len(got), 0)
			assert.Greater(t, len(quoteForComment(name)), maxCommentName)
			return
		}
		assert.Equal(t, name, got)
	})
}
