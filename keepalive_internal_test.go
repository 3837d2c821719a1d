package advisory

import (
	"context"
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// tcpUserTimeout is TCP_USER_TIMEOUT from linux/tcp.h (not in package syscall), for
// reading the option back (package sockfd sets it).
const tcpUserTimeout = 0x12

// TestKeepaliveIsAppliedOnBothEnds reads back, on a lock connection, what the server
// says its keepalive settings are (SHOW) and what the kernel says of the client socket
// (getsockopt). TestMain (in advisory_test) exports the test server's DSN.
func TestKeepaliveIsAppliedOnBothEnds(t *testing.T) {
	dsn := os.Getenv(pgtest.EnvDSN)
	if dsn == "" {
		pgtest.Need(t, nil, errors.New("TestMain found no server"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := TCPKeepalive{Idle: 3 * time.Second, Interval: 2 * time.Second, Count: 4, UserTimeout: 11 * time.Second}
	server := TCPKeepalive{Idle: 7 * time.Second, Interval: 4 * time.Second, Count: 6}
	m, err := New(ctx, dsn, WithClientKeepalive(client), WithServerKeepalive(server),
		WithConnectionCheckInterval(1500*time.Millisecond))
	require.NoError(t, err)
	defer m.Close()

	pc, err := m.pool.Acquire(ctx)
	require.NoError(t, err)
	defer pc.Release()
	want := map[string]string{
		"tcp_keepalives_idle":                 "7", // seconds
		"tcp_keepalives_interval":             "4",
		"tcp_keepalives_count":                "6",
		"tcp_user_timeout":                    "31000", // ms: Idle + Interval*Count
		"lock_timeout":                        "0",
		"statement_timeout":                   "0",
		"idle_in_transaction_session_timeout": "0",
	}
	if serverVersion(pc.Conn().PgConn().ParameterStatus("server_version")) >= 140000 {
		want["client_connection_check_interval"] = "1500ms"
		want["idle_session_timeout"] = "0"
	}
	for name, value := range want {
		var got string
		require.NoError(t, pc.QueryRow(ctx, "SHOW "+name).Scan(&got))
		assert.Equal(t, value, got, "SHOW %s", name)
	}

	conn := pc.Conn().PgConn().Conn()
	if nc, ok := conn.(interface{ NetConn() net.Conn }); ok { // the cancel-keeping wrapper (cancelreq.Cancels)
		conn = nc.NetConn()
	}
	tcp, ok := conn.(*net.TCPConn)
	require.True(t, ok, "lock connections are TCP here")
	raw, err := tcp.SyscallConn()
	require.NoError(t, err)
	opts := map[string][2]int{ // level, option
		"SO_KEEPALIVE":     {syscall.SOL_SOCKET, syscall.SO_KEEPALIVE},
		"TCP_KEEPIDLE":     {syscall.IPPROTO_TCP, syscall.TCP_KEEPIDLE},
		"TCP_KEEPINTVL":    {syscall.IPPROTO_TCP, syscall.TCP_KEEPINTVL},
		"TCP_KEEPCNT":      {syscall.IPPROTO_TCP, syscall.TCP_KEEPCNT},
		"TCP_USER_TIMEOUT": {syscall.IPPROTO_TCP, tcpUserTimeout},
	}
	wantOpt := map[string]int{"SO_KEEPALIVE": 1, "TCP_KEEPIDLE": 3, "TCP_KEEPINTVL": 2, "TCP_KEEPCNT": 4, "TCP_USER_TIMEOUT": 11000}
	for name, o := range opts {
		var got int
		var gerr error
		require.NoError(t, raw.Control(func(fd uintptr) { got, gerr = syscall.GetsockoptInt(int(fd), o[0], o[1]) }))
		require.NoError(t, gerr)
		assert.Equal(t, wantOpt[name], got, name)
	}
}

func TestServerVersion(t *testing.T) {
	for in, want := range map[string]int{
		"15.18 (Debian 15.18-0+deb12u1)": 150018,
		"16.4":                           160004,
		"17beta1":                        170000,
		"14rc1":                          140000,
		"garbage":                        0,
	} {
		assert.Equal(t, want, serverVersion(in), in)
	}
}
