package main

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory/internal/connstr"
)

// settingVars are the libpq variables that say where to connect. With none of them, no
// --dsn and no DATABASE_URL, nothing was given: pgx falls back to libpq's defaults (the
// local Unix socket, the OS user's name), which is rarely what was meant.
var settingVars = []string{"PGHOST", "PGHOSTADDR", "PGPORT", "PGDATABASE", "PGUSER", "PGSERVICE"}

// given reports whether any connection setting was given: --dsn, DATABASE_URL or one of
// settingVars.
func (c *connFlags) given() bool {
	if dsn, _ := c.connString(); dsn != "" {
		return true
	}
	for _, v := range settingVars {
		if os.Getenv(v) != "" {
			return true
		}
	}
	return false
}

// attempts returns the flags to connect with: c, but a single attempt when nothing was
// given (libpq's defaults are a guess, not a server that is coming up).
func (c *connFlags) attempts() *connFlags {
	if c.given() {
		return c
	}
	one := *c
	one.timeout = 0
	return &one
}

// connectFailure is the exit-69 error of a connect that failed; gaveUp says that the
// server was still not up when --connect-timeout ended. It says so when no connection
// setting was given at all.
func (c *connFlags) connectFailure(cfg *pgconnConfig, err error, gaveUp bool) error {
	reason := connectReason(err, cfg.Password)
	switch {
	case !c.given():
		return fail(exitUnavailable, "cannot connect: no --dsn or DATABASE_URL was given, and none of %s is set; "+
			"tried libpq's defaults, %s: %s", strings.Join(settingVars, ", "), targetOf(cfg), reason)
	case gaveUp:
		return fail(exitUnavailable, "cannot connect to %s: %s (still failing after %v of retries, --connect-timeout)",
			targetOf(cfg), reason, c.timeout)
	}
	return fail(exitUnavailable, "cannot connect to %s: %s", targetOf(cfg), reason)
}

// connectReason is why a connect failed, on one line and without what the message's
// prefix already says: pgx's "failed to connect to `user=... database=...`:" (the target
// is named before it) and the library's "advisory: connect:". pgx puts each attempt's
// error (a host's addresses, a failed TLS then plain attempt) on a line of its own,
// indented with a tab: they are joined with "; " instead, which display would otherwise
// print as a literal \n\t. The password is masked, as the library masks it.
func connectReason(err error, password string) string {
	var ce *pgconn.ConnectError
	reason := strings.TrimPrefix(err.Error(), "advisory: connect: ")
	if errors.As(err, &ce) && ce.Unwrap() != nil {
		reason = ce.Unwrap().Error()
	}
	lines := strings.FieldsFunc(reason, func(r rune) bool { return r == '\n' })
	for i := range lines {
		lines[i] = strings.TrimSpace(lines[i])
	}
	return connstr.Scrub(strings.Join(lines, "; "), []string{password})
}

// pgconnConfig is the part of a pool's configuration a connect failure names.
type pgconnConfig = pgconn.Config

// targetOf describes where a config points, without the password: every host of a
// multi-host string ("h1:5432,h2:5432"), each once (pgconn lists a host twice for
// sslmode=prefer's plain-text fallback).
func targetOf(cc *pgconnConfig) string {
	hosts := []string{fmt.Sprintf("%s:%d", cc.Host, cc.Port)}
	for _, fb := range cc.Fallbacks {
		if h := fmt.Sprintf("%s:%d", fb.Host, fb.Port); !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}
	return fmt.Sprintf("%s (user %s, database %s)", strings.Join(hosts, ","), cc.User, cc.Database)
}
