// Package connstr finds the passwords in PostgreSQL connection strings, so that no
// message built from a connection string, or from an error a library returned about one,
// ever shows them. It does not trust the strings to be well formed: a malformed string is
// exactly the one that ends up in an error message.
package connstr

import (
	"net/url"
	"sort"
	"strings"
)

// Mask replaces a password in output.
const Mask = "xxxxx"

// Redact returns s with every password in it replaced by [Mask] where it stands, so that
// s may be any message: one connection string, several, or none amid other text. It
// masks the userinfo password of every URL (postgres://user:PASSWORD@host/db, any
// scheme) and the value of every password key, in a URL query or in the keyword/value
// form (password=PASSWORD, sslpassword = 'PASS WORD', with escapes). It errs on the side
// of masking too much (an unescaped '@', '/' or space in a URL's password still ends up
// masked; a password= value in a URL query is masked to the next white space); the rest of
// s is unchanged. Unlike Scrub, it does not hunt for the passwords' decoded forms
// elsewhere in s: a short password does not mask every occurrence of its letters.
func Redact(s string) string {
	return mask(s, append(urlSpans(s), keywordSpans(s)...))
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

// span is the byte range [start, end) of a password in a string.
type span struct{ start, end int }

// urlSpans finds the userinfo password of every "scheme://" in s. A URL ends at white
// space, and its userinfo at the last '@' before its query or fragment. For a password
// with an unescaped space, the first '@' after the scheme also counts, if the text up to
// it looks like "user:password" (no '/' and no other URL in it).
func urlSpans(s string) []span {
	var out []span
	for i := strings.Index(s, "://"); i >= 0; i = nextIndex(s, "://", i) {
		start := i + len("://")
		rest := s[start:]
		auth := rest[:indexOrLen(rest, isSpace)]
		auth = auth[:indexOrLen(auth, func(c byte) bool { return c == '?' || c == '#' })]
		if sp, ok := userinfoPassword(start, auth, strings.LastIndexByte(auth, '@')); ok {
			out = append(out, sp)
		}
		if at := strings.IndexByte(rest, '@'); at >= 0 && !strings.ContainsAny(rest[:at], "/\n") &&
			!strings.Contains(rest[:at], "://") {
			if sp, ok := userinfoPassword(start, rest, at); ok {
				out = append(out, sp)
			}
		}
	}
	return out
}

// userinfoPassword returns the password in u[:at], "user:password", as a span of the
// string in which u begins at offset.
func userinfoPassword(offset int, u string, at int) (span, bool) {
	if at < 0 {
		return span{}, false
	}
	colon := strings.IndexByte(u[:at], ':')
	if colon < 0 || colon+1 == at || indexOrLen(u[:colon], isSpace) < colon {
		return span{}, false
	}
	return span{offset + colon + 1, offset + at}, true
}

// keywordSpans finds the values of every key ending in "password" followed by '=', quotes
// included, in libpq's keyword/value form: values optionally single-quoted, backslash
// escaping the next character. Every "password" followed by '=' counts, wherever it
// stands: a malformed string may not tokenize the way the parser of record would.
func keywordSpans(s string) []span {
	var out []span
	lower := asciiLower(s)
	for i := 0; ; {
		k := strings.Index(lower[i:], "password")
		if k < 0 {
			return out
		}
		j := skipSpace(s, i+k+len("password"))
		i += k + 1
		if j < len(s) && s[j] == '=' {
			start := skipSpace(s, j+1)
			if _, _, end := readValue(s, start); end > start {
				out = append(out, span{start, end})
			}
		}
	}
}

// mask replaces the spans of s, merged where they overlap, with Mask.
func mask(s string, spans []span) string {
	if len(spans) == 0 {
		return s
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i].start < spans[j].start })
	var b strings.Builder
	last := 0 // s[:last] is written
	for _, sp := range spans {
		if sp.end <= last {
			continue
		}
		if sp.start >= last {
			b.WriteString(s[last:sp.start])
			b.WriteString(Mask)
		}
		last = sp.end
	}
	b.WriteString(s[last:])
	return b.String()
}

func nextIndex(s, sub string, i int) int {
	if j := strings.Index(s[i+1:], sub); j >= 0 {
		return i + 1 + j
	}
	return -1
}

func indexOrLen(s string, stop func(byte) bool) int {
	for i := 0; i < len(s); i++ {
		if stop(s[i]) {
			return i
		}
	}
	return len(s)
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

// keywordSecrets returns the password values keywordSpans finds, each as written and
// unquoted and unescaped.
func keywordSecrets(s string) []string {
	var out []string
	for _, sp := range keywordSpans(s) {
		raw, value, _ := readValue(s, sp.start)
		out = append(out, raw, value)
	}
	return out
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
