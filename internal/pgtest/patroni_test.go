package pgtest_test

import (
	"context"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestPatroniCluster: the harness starts etcd, two Patroni nodes and HAProxy; HAProxy
// routes to the leader, the other node is a streaming standby, and Close leaves no
// process behind (the postmasters included).
func TestPatroniCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a Patroni cluster takes tens of seconds to start")
	}
	start := time.Now()
	c := pgtest.PatroniForTest(t, pgtest.PatroniOptions{})
	t.Logf("cluster up in %v", time.Since(start).Round(time.Millisecond))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	leader, err := c.Leader(ctx)
	require.NoError(t, err)

	defer func() {
		if t.Failed() {
			t.Log(c.Logs())
		}
	}()
	port, standby := serverPortAndRecovery(t, ctx, c.DSN())
	require.Equal(t, leader.PGPort, port, "HAProxy routes to the leader")
	require.False(t, standby)
	for _, n := range c.Nodes {
		if n != leader {
			_, standby := serverPortAndRecovery(t, ctx, n.DSN())
			require.True(t, standby, "%s is a standby", n.Name)
		}
	}
	pids := c.PIDs()
	require.GreaterOrEqual(t, len(pids), 5, "etcd, haproxy, two patroni, two postmasters at least")
	c.Close()
	for _, pid := range pids {
		require.ErrorIs(t, syscall.Kill(pid, 0), syscall.ESRCH, "process %d outlived Close", pid)
	}
}

// serverPortAndRecovery returns the port of the server dsn reaches and whether it is a
// standby.
func serverPortAndRecovery(t *testing.T, ctx context.Context, dsn string) (int, bool) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var port int
	var rec bool
	require.NoError(t, conn.QueryRow(ctx, "SELECT current_setting('port')::int, pg_is_in_recovery()").Scan(&port, &rec))
	return port, rec
}

// TestPatroniHAProxyConfig: HAProxy finds the leader as Patroni's sample haproxy.cfg does
// (an HTTP OPTIONS /primary check of each node's REST port), and closes the sessions of a
// server marked down only when asked.
func TestPatroniHAProxyConfig(t *testing.T) {
	nodes := []*pgtest.PatroniNode{{Name: "node0", PGPort: 5001, RESTPort: 8001}, {Name: "node1", PGPort: 5002, RESTPort: 8002}}
	for _, shutdown := range []bool{false, true} {
		cfg := pgtest.PatroniHAProxyConfigForTest(6000, nodes, shutdown)
		require.Contains(t, cfg, "bind 127.0.0.1:6000\n")
		require.Contains(t, cfg, "option httpchk OPTIONS /primary\n    http-check expect status 200\n")
		require.Contains(t, cfg, "server node0 127.0.0.1:5001 maxconn 100 check port 8001\n")
		require.Contains(t, cfg, "server node1 127.0.0.1:5002 maxconn 100 check port 8002\n")
		require.Equal(t, shutdown, strings.Contains(cfg, "default-server inter 1s fall 2 rise 1 on-marked-down shutdown-sessions\n"), cfg)
		require.Contains(t, cfg, "default-server inter 1s fall 2 rise 1")
	}
}
