package pgtest_test

import (
	"net"

	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestHAProxy: the helper runs a real HAProxy in TCP mode in front of the server, as a
// Patroni cluster's clients reach their primary: the startup's BackendKeyData passes
// through (the client sees its backend's own pid), yet the server sees the proxy's end of
// the connection, not the client's; Close ends the sessions through it.
func TestHAProxy(t *testing.T) {
	srv := server(t)
	for _, opts := range []pgtest.HAProxyOptions{{}, {ShutdownSessions: true}} {
		h := pgtest.HAProxyForTest(t, srv, opts)
		ctx := ctxT(t)
		c := connect(t, h.DSN())
		assert.Equal(t, c.PgConn().PID(), backendPID(t, c), "BackendKeyData passes through")
		var port int32
		require.NoError(t, c.QueryRow(ctx, "SELECT inet_client_port()").Scan(&port))
		assert.NotEqual(t, int32(localPort(t, c)), port, "the server sees the proxy's connection")
		require.NoError(t, h.Close())
		require.Error(t, c.Ping(ctx), "a session through a stopped HAProxy")
	}
}

// localPort is the client's end of conn's TCP connection.
func localPort(t testing.TB, conn *pgx.Conn) int {
	t.Helper()
	addr, ok := conn.PgConn().Conn().LocalAddr().(*net.TCPAddr)
	require.True(t, ok, "a TCP connection")
	return addr.Port
}
