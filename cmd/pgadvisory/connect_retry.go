package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/connstr"
)

// Connect retries (--connect-timeout): a server that is not up yet (an init container
// starts beside its database) is tried again, with backoff, until the window ends; a
// failure that time will not fix (a wrong password, a database that does not exist, a
// transaction pooler, a standby) ends it at once.
const (
	attemptLimit = 30 * time.Second // one connection attempt, as before --connect-timeout
	firstBackoff = 100 * time.Millisecond
	maxBackoff   = 2 * time.Second
)

// runConnectTimeout is run's default --connect-timeout: in a Kubernetes init container
// the database may come up after the pod, and a run that gave up at once would crash-loop.
const runConnectTimeout = 30 * time.Second

// retry calls try until it succeeds, fails for a reason that does not go away with time,
// the --connect-timeout window ends or ctx ends (a signal). It says on stderr, once for
// each reason, that the server is not up yet, and once that it connected after all.
// gaveUp is true when the window ended with the server still not up.
func (c *connFlags) retry(ctx context.Context, where, password string, try func(context.Context) error) (gaveUp bool, err error) {
	start := time.Now()
	deadline := start.Add(c.timeout)
	backoff := firstBackoff
	said := ""
	for {
		actx, cancel := context.WithTimeout(ctx, c.attemptTimeout(deadline))
		err = try(actx)
		cancel()
		if err == nil {
			if said != "" {
				c.say("connected to %s after %s", where, age(time.Since(start)))
			}
			return false, nil
		}
		reason, transient := notUpYet(err)
		reason = connstr.Scrub(reason, []string{password}) // the server's message could repeat it
		if !transient || c.timeout == 0 || ctx.Err() != nil {
			return false, err
		}
		left := time.Until(deadline)
		if left <= 0 {
			return true, err
		}
		if reason != said {
			c.say("cannot connect to %s yet: %s; retrying for up to %v (--connect-timeout)", where, reason, c.timeout)
			said = reason
		}
		if !sleepCtx(ctx, min(backoff, left)) {
			return false, err
		}
		backoff = min(2*backoff, maxBackoff)
	}
}

// attemptTimeout bounds one attempt: 30 s, and within a window no later than its end
// (but at least a second, so that the last attempt can succeed).
func (c *connFlags) attemptTimeout(deadline time.Time) time.Duration {
	if c.timeout == 0 {
		return attemptLimit
	}
	return max(min(time.Until(deadline), attemptLimit), time.Second)
}

// say prints a line on stderr, masked and escaped (see display).
func (c *connFlags) say(format string, args ...any) {
	if c.stderr != nil {
		fmt.Fprintln(c.stderr, "pgadvisory: "+display(fmt.Sprintf(format, args...)))
	}
}

// sleepCtx sleeps for d; false if ctx ended first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// retriedCodes are the SQLSTATEs of a server that is starting, stopping or full: it
// will take the connection later.
var retriedCodes = map[string]bool{
	"57P03": true, // cannot_connect_now: the database system is starting up / in recovery
	"57P01": true, // admin_shutdown: shutting down (a restart)
	"57P02": true, // crash_shutdown
	"53300": true, // too_many_connections
	"08006": true, // connection_failure
}

// notUpYet says whether err means the server is not (yet) there to take the connection,
// and why, in a few words that never contain the password. Anything else (an
// authentication failure, an unknown database or role, a TLS error, the library's
// refusals) is not retried.
func notUpYet(err error) (reason string, ok bool) {
	var pgErr *pgconn.PgError
	var dnsErr *net.DNSError
	switch {
	case errors.Is(err, advisory.ErrInvalidOption), errors.Is(err, advisory.ErrPooler),
		errors.Is(err, advisory.ErrStandby), errors.Is(err, advisory.ErrUnsupportedServer):
		return "", false
	case errors.As(err, &pgErr):
		// Not %q: display escapes the message once, and %q's escapes would be escaped again.
		return fmt.Sprintf("the server says \"%s\" (SQLSTATE %s)", pgErr.Message, pgErr.Code), retriedCodes[pgErr.Code]
	case errors.Is(err, pgconn.ErrReadOnlyConnection), errors.Is(err, pgconn.ErrStandbyConnection):
		// target_session_attrs=read-write or primary, and no host is one: a failover under way.
		return "no server accepts writes yet (target_session_attrs)", true
	case errors.As(err, &dnsErr):
		return fmt.Sprintf("host %s not found (DNS)", dnsErr.Name), true
	case errors.Is(err, syscall.ECONNREFUSED):
		return "connection refused", true
	case errors.Is(err, syscall.ENOENT):
		return "no server socket yet", true
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, pgconn.ErrConnClosed):
		return "the server closed the connection", true
	case errors.Is(err, syscall.EHOSTUNREACH), errors.Is(err, syscall.ENETUNREACH):
		return "host or network unreachable", true
	case errors.Is(err, context.DeadlineExceeded), pgconn.Timeout(err), errors.Is(err, syscall.ETIMEDOUT):
		return "no answer (timeout)", true
	}
	return "", false
}
