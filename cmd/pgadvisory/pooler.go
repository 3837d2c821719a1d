package main

import (
	"errors"
	"strings"

	"github.com/pgadvisory/advisory"
)

// Behind a transaction pooler (PgBouncer pool_mode=transaction, Supabase's port 6543,
// Neon's -pooler endpoints, RDS Proxy) every command works: the library holds each lock
// as one open transaction there. What the library refuses with ErrPooler is a pooler
// where no lock can be held: statement pooling, which hands each statement to any server
// session and refuses transactions.

// poolerError explains the library's ErrPooler for command cmd, met on the connection to
// where: the connection succeeded (so not "cannot connect"), what the library saw, and
// the fix.
func poolerError(cmd, where string, err error) error {
	detail := poolerDetail(err)
	kind, fix := "a connection pooler that shares server sessions between clients",
		"connect directly, or through transaction or session pooling"
	if strings.HasPrefix(detail, "statement pooling") {
		kind = "a statement-pooling proxy (PgBouncer pool_mode=statement?)"
		detail = strings.TrimPrefix(strings.TrimPrefix(detail, "statement pooling"), ": ")
		detail, _, _ = strings.Cut(detail, "; no kind of advisory lock") // the advice below says it
	}
	msg := where + " is " + kind
	if detail != "" {
		msg += " (" + detail + ")"
	}
	return fail(exitUnavailable, "%s: %s: no advisory lock can be held through it; %s "+
		"(pool_mode=transaction or session)", cmd, msg, fix)
}

// poolerDetail is what the library saw that told it of the pooler ("statement pooling:
// the pooler hands server sessions ..."), without the error's "advisory:" prefixes.
func poolerDetail(err error) string {
	s := err.Error()
	// The sentinel's text without its prefix: the library prints one prefix per error.
	sentinel := strings.TrimPrefix(advisory.ErrPooler.Error(), "advisory: ")
	i := strings.Index(s, sentinel)
	if i < 0 || !errors.Is(err, advisory.ErrPooler) {
		return ""
	}
	return strings.TrimPrefix(s[i+len(sentinel):], ": ")
}
