package pgtest_test

import (
	"context"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// poolerNet makes a PoolerNet and a server of its own listening on it, for one test. Where
// no partition can be made the test is skipped, or fails under CI=true.
func poolerNet(t *testing.T) (*pgtest.PoolerNet, *pgtest.Server) {
	t.Helper()
	n, err := pgtest.NewPoolerNet()
	if errors.Is(err, pgtest.ErrUnavailable) && !pgtest.InCI() {
		t.Skipf("skipped: %v", err)
	}
	require.NoError(t, err)
	t.Cleanup(n.Close)
	s, err := pgtest.StartLocal(ctxT(t), pgtest.Options{ListenAddresses: []string{n.ServerAddr()},
		TrustCIDRs: []string{n.ServerCIDR()}})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	return n, s
}

// dialNoCancel connects to dsn with dial, sending no cancel request ever.
func dialNoCancel(t *testing.T, dsn string, dial pgconn.DialFunc) *pgconn.PgConn {
	t.Helper()
	cfg, err := pgconn.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.DialFunc = pgtest.NoCancel(dial)
	conn, err := pgconn.ConnectConfig(ctxT(t), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// query runs sql within d and returns the first column of its first row.
func query(conn *pgconn.PgConn, sql string, d time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	res, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return "", err
	}
	return string(res[0].Rows[0][0]), nil
}

// TestPoolerNetCutsEachLinkApart: PgBouncer in the pooler namespace serves a client in
// the client namespace and the test process on the host; a cut of the server link stops
// its queries but not its console, a cut of the client link stops the client alone, and
// a healed link works again. A SIGKILLed PgBouncer starts again on the same port.
func TestPoolerNetCutsEachLinkApart(t *testing.T) {
	n, s := poolerNet(t)
	b := pgtest.PgBouncerForTest(t, s, pgtest.PoolTransaction, pgtest.WithPoolerNet(n), pgtest.WithPoolSize(2))
	client := dialNoCancel(t, n.ClientDSN(b), n.DialClient)
	addr, err := query(client, "SELECT host(inet_client_addr())", 5*time.Second)
	require.NoError(t, err)
	assert.NotEqual(t, "127.0.0.1", addr, "the server sees PgBouncer come over the server link")
	clients, err := b.Show(ctxT(t), "CLIENTS")
	require.NoError(t, err)
	assert.True(t, slices.ContainsFunc(clients, func(c map[string]string) bool { return c["addr"] == n.ClientIP() }),
		"PgBouncer sees the client come from the client namespace: %v", clients)

	require.NoError(t, n.CutServerLink(s.Port()))
	_, err = query(dialNoCancel(t, b.DSN(), nil), "SELECT 1", time.Second)
	require.Error(t, err, "no query reaches the server over a cut server link")
	_, err = b.Show(ctxT(t), "POOLS")
	require.NoError(t, err, "the console answers over the same veth")
	require.NoError(t, n.Heal())
	require.Eventually(t, func() bool {
		_, err := query(dialNoCancel(t, b.DSN(), nil), "SELECT 1", 2*time.Second)
		return err == nil
	}, 30*time.Second, 100*time.Millisecond, "queries flow once the link is healed")

	require.NoError(t, n.CutClientLink())
	_, err = query(client, "SELECT 1", time.Second)
	require.Error(t, err, "the client's query is lost on a cut client link")
	_, err = query(dialNoCancel(t, b.DSN(), nil), "SELECT 1", 5*time.Second)
	require.NoError(t, err, "the host still queries through PgBouncer")
	require.NoError(t, n.Heal())

	require.NoError(t, b.Stop(ctxT(t), syscall.SIGKILL))
	require.NoError(t, b.Start(ctxT(t)))
	_, err = query(dialNoCancel(t, n.ClientDSN(b), n.DialClient), "SELECT 1", 5*time.Second)
	require.NoError(t, err, "a restarted PgBouncer serves on the same port")
}
