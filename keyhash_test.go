package advisory_test

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// Golden values of SELECT hashtextextended(name, 0) from PostgreSQL 15 (x86-64). They pin
// the mapping: if one changes, two versions of this library would take different locks for
// the same name, and mutual exclusion between them would silently break.
var golden = []struct {
	name string
	key  advisory.Key
}{
	{"migrations", 4637455633556087398},
	{"", -6939563903564495251},
	{"a", 3591986179850072241},
	{"ab", 2833316173711343549},
	{"abc", -6747756470228489321},
	{"abcd", -1038429303365892052},
	{"abcdefgh", -8882191227074733005},
	{"abcdefghi", -3278210106038014113},
	{"abcdefghijk", 3112909444737856467},
	{"abcdefghijkl", -7556637188122330412},
	{"abcdefghijklm", 8871624171452417744},
	{"héllo wörld", 6639232088034648728},
	{"日本語のキー", -6417103087543039007},
	{"🔒 lock 🔑", -6188909294238617828},
	{"The quick brown fox jumps over the lazy dog", 2182139051089226439},
}

func TestKeyOfGolden(t *testing.T) {
	t.Parallel()
	for _, g := range golden {
		assert.Equal(t, g.key, advisory.KeyOf(g.name), "KeyOf(%q)", g.name)
	}
}

// TestKeyOfMatchesServer compares KeyOf with hashtextextended on thousands of random names
// of every length class (each tail length 0-11 and several 12-byte blocks) and script.
func TestKeyOfMatchesServer(t *testing.T) {
	t.Parallel()
	dsn(t)
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	alphabets := [][]rune{
		[]rune("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_/.:"),
		[]rune("äöüßéèêçñøåæœłśźżčřšžőű"),
		[]rune("日本語中文한국어русскийΕλληνικάעבריתالعربية"),
		[]rune("🔒🔑🚀🎉👍🏽🧪💾🐘"),
	}
	names := make([]string, 0, 5000)
	for len(names) < cap(names) {
		var b strings.Builder
		n := rng.IntN(64)
		for i := 0; i < n; i++ {
			a := alphabets[rng.IntN(len(alphabets))]
			b.WriteRune(a[rng.IntN(len(a))])
		}
		names = append(names, b.String())
	}
	for _, g := range golden {
		names = append(names, g.name)
	}
	rows, err := admin.Query(context.Background(),
		"SELECT n, hashtextextended(n, 0) FROM unnest($1::text[]) WITH ORDINALITY AS t(n, i) ORDER BY i", names)
	require.NoError(t, err)
	defer rows.Close()
	i := 0
	for rows.Next() {
		var name string
		var want int64
		require.NoError(t, rows.Scan(&name, &want))
		require.Equal(t, names[i], name)
		require.Equal(t, advisory.Key(want), advisory.KeyOf(name), "KeyOf(%q)", name)
		i++
	}
	require.NoError(t, rows.Err())
	require.Equal(t, len(names), i)
}

// FuzzKeyOf checks, for every input PostgreSQL can store as text, that KeyOf equals the
// server's hashtextextended (when a server is available), and for any input that KeyOf
// is deterministic and ValidateName does not panic.
func FuzzKeyOf(f *testing.F) {
	for _, g := range golden {
		f.Add(g.name)
	}
	f.Add(strings.Repeat("x", 4096))
	f.Add("\xff\xfe")
	f.Add("nul\x00byte")
	f.Fuzz(func(t *testing.T, name string) {
		k := advisory.KeyOf(name)
		require.Equal(t, k, advisory.KeyOf(name))
		err := advisory.ValidateName(name)
		storable := utf8.ValidString(name) && !strings.ContainsRune(name, 0)
		if !storable {
			require.ErrorIs(t, err, advisory.ErrInvalidKey)
			return
		}
		if srv == nil {
			return
		}
		var want int64
		require.NoError(t, admin.QueryRow(context.Background(), "SELECT hashtextextended($1, 0)", name).Scan(&want))
		require.Equal(t, advisory.Key(want), k, "KeyOf(%q)", name)
	})
}

func TestValidateName(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		in   string
		ok   bool
		msg  string
	}{
		{"plain", "migrations", true, ""},
		{"max length", strings.Repeat("a", advisory.MaxNameLen), true, ""},
		{"multi-byte", "日本語 🔒", true, ""},
		{"empty", "", false, "empty"},
		{"too long", strings.Repeat("a", advisory.MaxNameLen+1), false, "4097 bytes"},
		{"1 MiB", strings.Repeat("a", 1<<20), false, "1048576 bytes"},
		{"invalid UTF-8", "ok\xffbad", false, "UTF-8 (at byte 2)"},
		{"truncated rune", "日本"[:4], false, "UTF-8"},
		{"NUL", "a\x00b", false, "NUL byte (at byte 1)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := advisory.ValidateName(tc.in)
			if tc.ok {
				require.NoError(t, err)
				return
			}
			require.ErrorIs(t, err, advisory.ErrInvalidKey)
			require.Contains(t, err.Error(), tc.msg)
			require.Less(t, len(err.Error()), 200, "the message does not echo a huge name")
		})
	}
}

func TestInvalidNamesAreRefusedBeforeAnyIO(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	before := m.Stat().AcquireCount()
	for _, name := range []string{"", strings.Repeat("k", 1<<20), "bad\xffutf8", "nul\x00"} {
		_, err := m.Lock(ctx, name)
		require.ErrorIs(t, err, advisory.ErrInvalidKey)
		_, err = m.TryLock(ctx, name)
		require.ErrorIs(t, err, advisory.ErrInvalidKey)
		err = m.Do(ctx, name, func(context.Context) error { t.Error("fn ran"); return nil })
		require.ErrorIs(t, err, advisory.ErrInvalidKey)
	}
	assert.Equal(t, before, m.Stat().AcquireCount(), "no connection was taken for an invalid name")
}
