package main

import (
	"strconv"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestEscape(t *testing.T) {
	for in, want := range map[string]string{
		"migrations":                   "migrations",
		`say "hi"`:                     `say "hi"`,
		"tab\there\nnew":               `tab\there\nnew`,
		"\x1b]0;PWNED\a\x1b[2K\rforge": `\x1b]0;PWNED\a\x1b[2K\rforge`,
		`back\slash`:                   `back\\slash`,
		"del\x7f":                      `del\x7f`,
		"bad\xff\xfe":                  `bad\xff\xfe`,
		"c1\u0085\u009b":               `c1\u0085\u009b`,
		"bidi\u202eevil\u2066":         `bidi\u202eevil\u2066`,
		"nbsp\u00a0zw\u200b":           `nbsp\u00a0zw\u200b`,
		"ls\u2028ps\u2029":             `ls\u2028ps\u2029`,
		"émoji 😀 日本":                   "émoji 😀 日本",
		"replacement \ufffd":           "replacement \ufffd",
		"\U000e0001 tag":               `\U000e0001 tag`,
	} {
		assert.Equal(t, want, escape(in), "%q", in)
	}
}

// FuzzEscape: whatever the input, the output is valid UTF-8 without anything a terminal
// acts on, and it decodes back to the input (so different inputs print differently).
func FuzzEscape(f *testing.F) {
	for _, s := range []string{"", "migrations", "\x1b]0;PWNED\a\x1b[2K\r", "a\tb\nc", `\x1b`, "\xff\u0080",
		"\u202e\u2066", "it's \"quoted\"", "\\\\", "😀\U0010ffff"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := escape(s)
		requireTerminalSafe(t, out)
		back, err := unescape(out)
		require.NoError(t, err, "escape(%q) = %q", s, out)
		require.Equal(t, s, back, "escape(%q) = %q does not decode back", s, out)
	})
}

// requireTerminalSafe fails if s has invalid UTF-8, a C0 or C1 control, DEL, ESC or a
// bidi override or isolate.
func requireTerminalSafe(t *testing.T, s string) {
	t.Helper()
	require.True(t, utf8.ValidString(s), "invalid UTF-8: %q", s)
	for _, r := range s {
		bad := r < 0x20 || (r >= 0x7f && r <= 0x9f) || (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
		require.False(t, bad, "%U in %q", r, s)
	}
}

// unescape reverses escape, with Go's rules for escapes in string literals.
func unescape(s string) (string, error) {
	var b []byte
	for len(s) > 0 {
		r, multibyte, rest, err := strconv.UnquoteChar(s, 0)
		if err != nil {
			return "", err
		}
		if r < utf8.RuneSelf || !multibyte {
			b = append(b, byte(r))
		} else {
			b = utf8.AppendRune(b, r)
		}
		s = rest
	}
	return string(b), nil
}
