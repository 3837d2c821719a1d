package advisory_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pgadvisory/advisory"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close() // nothing listens there now
	start := time.Now()
	_, err = advisory.New(ctxT(t), "host=127.0.0.1 port="+strconv.Itoa(addr.Port)+" user=nobody password=s3cret sslmode=disable")
	require.Error(t, err)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Contains(t, err.Error(), "advisory: connect")
	assert.NotContains(t, err.Error(), "s3cret", "no password in messages")
	var ce *pgconn.ConnectError
	assert.ErrorAs(t, err, &ce)
}

// No connection string that fails to parse has its password echoed, in any form pgx's
// own redaction misses (spaces around '=', quoting, escapes).
func TestInvalidConnStringNeverShowsThePassword(t *testing.T) {
	t.Parallel()
	for _, cs := range []string{
		"postgres://u:S3cr3tPW@host:notaport/db",
		"host=127.0.0.1 password = S3cr3tPW port=abc",
		"host=127.0.0.1 password= S3cr3tPW port=abc",
		`host=127.0.0.1 password='S3cr3tPW\' port=abc`,
		`host=127.0.0.1 password='S3cr3tPW port=abc`,
		"postgres://u@host:notaport/db?password=S3cr3tPW",
	} {
		_, err := advisory.New(context.Background(), cs)
		require.ErrorIs(t, err, advisory.ErrInvalidOption, cs)
		assert.Contains(t, err.Error(), "advisory: invalid option: connection string", cs)
		assert.NotContains(t, err.Error(), "S3cr3tPW", cs)
	}
}

// A connection-string key that is no setting at all reaches the server as one (pgx
// forwards unknown keys): the error names the key and says why.
func TestUnknownConnStringKeyIsExplained(t *testing.T) {
	t.Parallel()
	_, err := advisory.New(ctxT(t), dsn(t, "no_such_setting=1"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `the connection string's key "no_such_setting"`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "42704", pgErr.Code)
}
