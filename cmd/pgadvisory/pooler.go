package main

import (
	"errors"
	"strings"

	"github.com/pgadvisory/advisory"
)

// poolerWhy says why command cmd cannot work through a transaction-pooling proxy, where
// each transaction may run on another server session, one that other clients share.
func poolerWhy(cmd string) string {
	switch cmd {
	case "run":
		return "run holds a session-level lock, which lives on one server session for as long as " +
			"CMD runs; through the proxy that session is not run's own"
	case "status":
		return "status reads the locks through the library's connection, which refuses such a proxy " +
			"before its first statement (connected to PostgreSQL itself, status shows the locks of the " +
			"proxy's clients too, by server pid)"
	case "break":
		return "break reads the holders and waits for the release through the library's connection, " +
			"which refuses such a proxy before its first statement"
	}
	return cmd + " connects through the library's connection, which refuses such a proxy"
}

// poolerError explains the library's ErrPooler for command cmd, met on the connection to
// where: the connection succeeded (so not "cannot connect"), what the library saw, why cmd
// cannot work there, and the fix. New may not see the proxy (another client's traffic can
// hand it two server sessions); the lock statement then does, and says it the same way.
func poolerError(cmd, where string, err error) error {
	msg := where + " is a transaction-pooling proxy (PgBouncer pool_mode=transaction?), " +
		"not a PostgreSQL session of our own"
	if detail := poolerDetail(err); detail != "" {
		msg += " (" + detail + ")"
	}
	return fail(exitUnavailable, "%s: %s: %s; connect directly to PostgreSQL, or through session pooling "+
		"(pool_mode=session)", cmd, msg, poolerWhy(cmd))
}

// poolerDetail is what the library saw that told it of the proxy ("two client connections
// reached the same backend (pid 123)"), without the error's "advisory:" prefixes.
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
