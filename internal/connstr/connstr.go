// Package connstr finds the passwords in PostgreSQL connection strings, so that no
// message built from a connection string, or from an error a library returned about one,
// ever shows them. It does not trust the strings to be well formed: a malformed string is
// exactly the one that ends up in an error message.
package connstr

import (
	"net/url"
	"strings"
)

// Mask replaces a password in output.
const Mask = "xxxxx"

// Redact returns s with every password in it replaced by [Mask]: in a URL
// (postgres://user:PASSWORD@host/db, and ?password=PASSWORD in its query) or in the
// keyword/value form (password=PASSWORD, password = 'PASS WORD', with escapes), and
// anything else Secrets finds. The rest of s is unchanged.
func Redact(s string) string {
	return Scrub(s, Secrets(s))
}

// Secrets returns the password values in s, as written and as decoded (URL escapes,
// quoting), longest first. It errs on the side of finding too much.
func Secrets(s string) []string {
	var out []string
	if i := strings.Index(s, "://"); i >= 0 {
		out = append(out, urlSecrets(s[i+3:])...)
	}
	out = append(out, keywordSecrets(s)...)
	return longestFirst(out)
}

// Scrub replaces every occurrence of each secret in text with [Mask].
func Scrub(text string, secrets []string) string {
	for _, sec := range longestFirst(secrets) {
		if sec != "" {
			text = strings.ReplaceAll(text, sec, Mask)
		}
	}
	return text
}

// urlSecrets finds the password of a URL's userinfo and password= query values. The
// userinfo is taken both up to the first '@' and up to the last, since an unescaped '@'
// or '/' in a password is a common mistake that URL parsers reject.
func urlSecrets(rest string) []string {
	var out []string
	for _, at := range []int{strings.Index(rest, "@"), strings.LastIndex(rest, "@")} {
		if at < 0 {
			continue
		}
		if _, pw, ok := strings.Cut(rest[:at], ":"); ok {
			out = append(out, withDecoded(pw)...)
		}
	}
	for _, part := range strings.FieldsFunc(rest, func(r rune) bool { return r == '?' || r == '&' || r == '#' }) {
		if v, ok := strings.CutPrefix(part, "password="); ok {
			out = append(out, withDecoded(v)...)
		}
	}
	return out
}

func withDecoded(v string) []string {
	out := []string{v}
	if d, err := url.PathUnescape(v); err == nil && d != v {
		out = append(out, d)
	}
	if d, err := url.QueryUnescape(v); err == nil && d != v {
		out = append(out, d)
	}
	return out
}

// keywordSecrets finds the values of password keys in libpq's keyword/value form:
// key = value pairs separated by spaces, values optionally single-quoted, backslash
// escaping the next character. A value is returned as written and unescaped. Every
// "password" followed by '=' counts, wherever it stands: a malformed string may not
// tokenize the way the parser of record would.
func keywordSecrets(s string) []string {
	var out []string
	lower := asciiLower(s) // same length as s, whatever the bytes
	for i := 0; ; {
		k := strings.Index(lower[i:], "password")
		if k < 0 {
			return out
		}
		j := skipSpace(s, i+k+len("password"))
		i += k + 1
		if j < len(s) && s[j] == '=' {
			raw, value, _ := readValue(s, skipSpace(s, j+1))
			out = append(out, raw, value)
		}
	}
}

// readValue reads one value starting at i: it returns the text as written, the value
// unquoted and unescaped, and the index after it.
func readValue(s string, i int) (raw, value string, next int) {
	start := i
	var b strings.Builder
	quoted := i < len(s) && s[i] == '\''
	if quoted {
		i++
	}
	for ; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '\\' && i+1 < len(s):
			i++
			b.WriteByte(s[i])
		case quoted && c == '\'':
			return s[start : i+1], b.String(), i + 1
		case !quoted && isSpace(c):
			return s[start:i], b.String(), i
		default:
			b.WriteByte(c)
		}
	}
	return s[start:], b.String(), len(s)
}

func asciiLower(s string) string {
	b := []byte(s)
	for i, c := range b {
		if 'A' <= c && c <= 'Z' {
			b[i] = c + 'a' - 'A'
		}
	}
	return string(b)
}

func skipSpace(s string, i int) int {
	for i < len(s) && isSpace(s[i]) {
		i++
	}
	return i
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'
}

func longestFirst(in []string) []string {
	out := make([]string, 0, len(in))
	seen := map[string]bool{}
	for _, s := range in {
		if s != "" && !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	// insertion sort: a handful of entries
	for i := 1; i < len(out); i++ {
		for j := i; j > 0 && len(out[j]) > len(out[j-1]); j-- {
			out[j], out[j-1] = out[j-1], out[j]
		}
	}
	return out
}
