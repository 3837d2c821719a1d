package advisory

import (
	"strconv"
	"strings"
	"testing"
	"time"

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
		got, prefix, since, ok := nameFromQuery(c + "SELECT 1")
		require.True(t, ok)
		assert.True(t, since.IsZero())
		at := time.UnixMicro(1764115200123456)
		h := heldComment(name, at)
		require.LessOrEqual(t, len(h), len(c)+len(" since 1764115200123456"), "and with the grant time")
		gotH, prefixH, sinceH, ok := nameFromQuery(h + "SELECT 1")
		require.True(t, ok)
		assert.Equal(t, got, gotH)
		assert.Equal(t, prefix, prefixH)
		assert.True(t, at.Equal(sinceH), "the grant time read back: %v", sinceH)
		if prefix {
			assert.True(t, strings.HasPrefix(name, got), "a recorded start is the name's start")
			assert.Greater(t, len(got), 0)
			assert.Greater(t, len(quoteForComment(name)), maxCommentName)
			return
		}
		assert.Equal(t, name, got)
	})
}

// The text cache returns what statementsFor builds, and stays bounded: names past
// maxCachedNames, and names longer than maxCachedNameLen, are built per call.
func TestTextCacheIsBoundedAndExact(t *testing.T) {
	var c textCache
	for i := range maxCachedNames + 100 {
		name := "cache/" + strconv.Itoa(i)
		for _, direct := range []bool{false, true} {
			got := c.statements(name, i%2 == 0, i%3 == 0, direct)
			if want := statementsFor(name, i%2 == 0, i%3 == 0, direct); got != want {
				t.Fatalf("%q: cached %+v, built %+v", name, got, want)
			}
		}
	}
	if n := len(c.m); n != maxCachedNames {
		t.Fatalf("the cache holds %d entries, the bound is %d", n, maxCachedNames)
	}
	var small textCache
	long := strings.Repeat("x", maxCachedNameLen+1)
	if got := small.statements(long, false, false, true); got != statementsFor(long, false, false, true) {
		t.Fatal("a long name's statements differ from statementsFor's")
	}
	if len(small.m) != 0 {
		t.Fatal("a name longer than maxCachedNameLen was cached")
	}
	if got := small.statements("", true, true, false); got != baseStatements[0][1][1] || len(small.m) != 0 {
		t.Fatal("a raw key's statements are the base ones, never cached")
	}
}

// FuzzNameFromQuery: any session's statement text reaches nameFromQuery (Holders reads
// every holder's pg_stat_activity.query): it never panics, and what it reads, written
// again as the library writes it, reads back the same.
func FuzzNameFromQuery(f *testing.F) {
	f.Add(`/* advisory lock "a" */ SELECT 1`)
	f.Add(`/* advisory lock "a" since 1764115200123456 */ SELECT 1`)
	f.Add(`/* advisory lock prefix "a\" since 1 */" since 99999999999999999999 */ `)
	f.Add(`/* advisory lock "a" since -5 */ `)
	f.Fuzz(func(t *testing.T, query string) {
		name, _, since, ok := nameFromQuery(query)
		if !ok {
			return
		}
		c := nameComment(name)
		if !since.IsZero() {
			c = heldComment(name, since)
		}
		again, _, sinceAgain, ok := nameFromQuery(c)
		require.True(t, ok, "%q", c)
		if len(quoteForComment(name)) <= maxCommentName {
			assert.Equal(t, name, again)
		}
		assert.True(t, since.Equal(sinceAgain), "%v, then %v", since, sinceAgain)
	})
}
