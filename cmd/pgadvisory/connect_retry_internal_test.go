package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"

	"github.com/pgadvisory/advisory"
)

// TestNotUpYet: which connect failures --connect-timeout retries. A server that is not
// up yet, starting, stopping or full is retried; a failure time will not fix is not.
func TestNotUpYet(t *testing.T) {
	t.Parallel()
	wrap := func(err error) error { return fmt.Errorf("advisory: connect: %w", err) }
	pg := func(code string) error { return wrap(&pgconn.PgError{Severity: "FATAL", Code: code, Message: "m"}) }
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, tc := range []struct {
		err    error
		retry  bool
		reason string
	}{
		{wrap(refused), true, "connection refused"},
		{wrap(&net.DNSError{Err: "no such host", Name: "db", IsNotFound: true}), true, "host db not found (DNS)"},
		{wrap(io.ErrUnexpectedEOF), true, "the server closed the connection"},
		{wrap(fmt.Errorf("lock: %w", pgconn.ErrConnClosed)), true, "the server closed the connection"},
		{wrap(context.DeadlineExceeded), true, "no answer (timeout)"},
		{pg("57P03"), true, `the server says "m" (SQLSTATE 57P03)`},
		{pg("53300"), true, "SQLSTATE 53300"},
		{pg("57P01"), true, "SQLSTATE 57P01"},
		{pg("28P01"), false, ""}, // invalid_password
		{pg("28000"), false, ""}, // invalid_authorization_specification: no pg_hba.conf entry, unknown role
		{pg("3D000"), false, ""}, // invalid_catalog_name: no such database
		{fmt.Errorf("%w: %w", advisory.ErrPooler, refused), false, ""},
		{fmt.Errorf("%w: %w", advisory.ErrStandby, io.EOF), false, ""},
		{wrap(advisory.ErrUnsupportedServer), false, ""},
		{wrap(errors.New("tls: failed to verify certificate")), false, ""},
		// A multi-host string with target_session_attrs=read-write during a failover: no
		// host accepts writes yet (issue 44 item 7).
		{wrap(errors.Join(refused, fmt.Errorf("ValidateConnect failed: %w", pgconn.ErrReadOnlyConnection))), true, "no server accepts writes yet"},
		{wrap(fmt.Errorf("ValidateConnect failed: %w", pgconn.ErrReadOnlyConnection)), true, "no server accepts writes yet"},
		{wrap(fmt.Errorf("ValidateConnect failed: %w", pgconn.ErrStandbyConnection)), true, "no server accepts writes yet"},
	} {
		reason, retry := notUpYet(tc.err)
		assert.Equal(t, tc.retry, retry, "%v", tc.err)
		if tc.retry {
			assert.Contains(t, reason, tc.reason, "%v", tc.err)
		}
	}
}

// TestTargetNamesEveryHost: a multi-host string is named by all its hosts, each once
// (sslmode=prefer lists each twice), so that a failover's retries name the promoted
// primary too (issue 44 item 7).
func TestTargetNamesEveryHost(t *testing.T) {
	t.Parallel()
	for dsn, want := range map[string]string{
		"host=a,b port=5432,5433 user=u dbname=d sslmode=prefer": "a:5432,b:5433 (user u, database d)",
		"postgres://u:secret@a:6543/d?sslmode=disable":           "a:6543 (user u, database d)",
	} {
		cfg, err := pgconn.ParseConfig(dsn)
		if assert.NoError(t, err) {
			assert.Equal(t, want, targetOf(cfg), dsn)
		}
	}
}
