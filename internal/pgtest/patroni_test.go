package pgtest_test

import (
	"context"
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
