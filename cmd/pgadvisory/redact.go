package main

import (
	"strings"
)

// mask replaces a password in printed text.
const mask = "xxxxx"

// redact masks every password in s that belongs to something shaped like a PostgreSQL
// connection string, wherever it appears in a message: the userinfo password of a
// postgres:// or postgresql:// URL, and the value of a password or sslpassword keyword
// (keyword/value form or URL query; spaces around '=' allowed; a quoted value may contain
// escaped quotes). It errs on the side of masking too much. It does not escape: see
// display.
func redact(s string) string {
	return redactKeywords(redactURLs(s))
}

// redactURLs masks the password in the userinfo of postgres:// and postgresql:// URLs.
func redactURLs(s string) string {
	var b strings.Builder
	last := 0
	for i := 0; i < len(s); i++ {
		start := schemeEnd(s, i)
		if start < 0 {
			continue
		}
		// A URL ends at white space; its userinfo ends at the last '@' before the query or
		// fragment. A password with a raw '/' or '@' is masked too (over-masking a path
		// that contains '@' is the price).
		end := start + strings.IndexFunc(s[start:]+" ", isSpace)
		authority := s[start:end]
		if q := strings.IndexAny(authority, "?#"); q >= 0 {
			authority = authority[:q]
		}
		at := strings.LastIndexByte(authority, '@')
		colon := strings.IndexByte(authority[:max(at, 0)], ':')
		if at >= 0 && colon >= 0 && colon+1 < at {
			b.WriteString(s[last : start+colon+1])
			b.WriteString(mask)
			last = start + at
		}
		i = end - 1
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// schemeEnd returns the index after "postgres://" or "postgresql://" (any case) at s[i:],
// or -1.
func schemeEnd(s string, i int) int {
	for _, scheme := range []string{"postgresql://", "postgres://"} {
		if len(s)-i >= len(scheme) && strings.EqualFold(s[i:i+len(scheme)], scheme) {
			return i + len(scheme)
		}
	}
	return -1
}

// redactKeywords masks the values of "password = value" (any case, so sslpassword and
// PGPASSWORD=... too), unquoted or single-quoted with backslash escapes, as libpq reads them.
func redactKeywords(s string) string {
	const kw = "password"
	var b strings.Builder
	last := 0
	for i := 0; i+len(kw) <= len(s); i++ {
		if !strings.EqualFold(s[i:i+len(kw)], kw) {
			continue
		}
		j := skipBlanks(s, i+len(kw))
		if j == len(s) || s[j] != '=' {
			continue
		}
		j = skipBlanks(s, j+1)
		end := valueEnd(s, j)
		if end > j {
			b.WriteString(s[last:j])
			b.WriteString(mask)
			last = end
		}
		i = max(end, i+len(kw)) - 1
	}
	if last == 0 {
		return s
	}
	b.WriteString(s[last:])
	return b.String()
}

// valueEnd returns the end of the keyword value that starts at s[j]: after the closing
// quote of a quoted value (the end of s if there is none), else at the first unescaped
// white space.
func valueEnd(s string, j int) int {
	if j < len(s) && s[j] == '\'' {
		for k := j + 1; k < len(s); k++ {
			switch s[k] {
			case '\\':
				k++
			case '\'':
				return k + 1
			}
		}
		return len(s)
	}
	k := j
	for ; k < len(s) && !isSpace(rune(s[k])); k++ {
		if s[k] == '\\' {
			k++
		}
	}
	return min(k, len(s))
}

func skipBlanks(s string, i int) int {
	for i < len(s) && isSpace(rune(s[i])) {
		i++
	}
	return i
}

// isSpace is libpq's white space in connection strings (ASCII only).
func isSpace(r rune) bool {
	switch r {
	case ' ', '\t', '\n', '\r', '\v', '\f':
		return true
	}
	return false
}
