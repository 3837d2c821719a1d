package pgtest

import (
	"net/url"
	"sort"
	"strings"
)

// WithParams returns dsn with params added, in the form dsn is in: a postgres:// or
// postgresql:// URL gets them as percent-encoded query parameters (replacing any of the
// same name), a keyword/value string gets them appended as key=value, quoted when needed
// (a later key wins in libpq's and pgx's parsing). Keys are added in sorted order so the
// result is deterministic.
func WithParams(dsn string, params map[string]string) string {
	keys := make([]string, 0, len(params))
	for k := range params {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	if isURL(dsn) {
		return urlWithParams(dsn, keys, params)
	}
	var b strings.Builder
	b.WriteString(strings.TrimSpace(dsn))
	for _, k := range keys {
		b.WriteString(" " + k + "=" + quoteValue(params[k]))
	}
	return b.String()
}

// WithPairs is WithParams for settings spelled "key=value", one per string (the
// form tests spell extra settings in). A string without "=" is a key with an empty
// value.
func WithPairs(dsn string, kv ...string) string {
	params := make(map[string]string, len(kv))
	for _, s := range kv {
		k, v, _ := strings.Cut(s, "=")
		params[strings.TrimSpace(k)] = strings.TrimSpace(v)
	}
	return WithParams(dsn, params)
}

// urlWithParams edits the raw query so that the URL's other parameters stay byte for byte
// as they were, and encodes a space as %20: libpq and pgx percent-decode URL parameters
// but keep a '+' as it is.
func urlWithParams(dsn string, keys []string, params map[string]string) string {
	base, query, _ := strings.Cut(dsn, "?")
	var kept []string
	for _, kv := range strings.Split(query, "&") {
		k, _, _ := strings.Cut(kv, "=")
		name, err := url.QueryUnescape(k)
		if _, replaced := params[name]; kv == "" || err == nil && replaced {
			continue
		}
		kept = append(kept, kv)
	}
	for _, k := range keys {
		kept = append(kept, escape(k)+"="+escape(params[k]))
	}
	return base + "?" + strings.Join(kept, "&")
}

func escape(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

func isURL(dsn string) bool {
	return strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://")
}

// quoteValue quotes a keyword/value value when it needs it: empty, or holding a space, a
// quote or a backslash.
func quoteValue(v string) string {
	if v != "" && !strings.ContainsAny(v, " \t\n'\\") {
		return v
	}
	v = strings.ReplaceAll(v, `\`, `\\`)
	return "'" + strings.ReplaceAll(v, `'`, `\'`) + "'"
}
