// Package faults_test is the fault-injection suite: real network partitions, SIGKILLed
// holder processes, terminated backends, server restarts, pool pressure and a chaos run,
// each against a real PostgreSQL. See docs/guarantees.md for what it proves.
package faults_test

import (
	"context"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// roleEnv selects a helper role: the test binary re-runs itself as a holder or a chaos
// worker process (see roles_test.go).
const roleEnv = "ADVISORY_FAULT_ROLE"

var (
	srv      *pgtest.Server
	startErr error
	admin    *pgxpool.Pool
	netLab   *partitionLab // nil when a partition cannot be made here; see labErr
	labErr   error
	poolNet  *pgtest.PoolerNet // nil when a partition cannot be made here; see poolErr
	poolErr  error
)

func TestMain(m *testing.M) {
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	os.Exit(runSuite(m))
}

func runSuite(m *testing.M) int {
	netLab, labErr = newPartitionLab()
	if netLab != nil {
		defer netLab.close()
	}
	poolNet, poolErr = pgtest.NewPoolerNet()
	if poolNet != nil {
		defer poolNet.Close()
	}
	// The parallel tests (after the serial ones, which fault the shared server) wait on
	// timeouts, and lanes (lanes_test.go) bound which of them overlap: all may start at
	// once, so that tests queued for a lane hold no place another needs (an explicit
	// -parallel wins).
	return pgtest.Suite{Srv: &srv, Err: &startErr, Admin: &admin, Start: startServer, Parallel: 32}.Run(m)
}

// startServer starts the suite's server: one that also listens on the partition lab's
// and the pooler network's server addresses, if there are such.
func startServer(ctx context.Context) (*pgtest.Server, error) {
	var opts pgtest.Options
	if netLab != nil {
		opts.ListenAddresses = append(opts.ListenAddresses, netLab.serverIP)
		opts.TrustCIDRs = append(opts.TrustCIDRs, netLab.cidr)
	}
	if poolNet != nil {
		opts.ListenAddresses = append(opts.ListenAddresses, poolNet.ServerAddr())
		opts.TrustCIDRs = append(opts.TrustCIDRs, poolNet.ServerCIDR())
	}
	if opts.ListenAddresses == nil {
		return pgtest.Start(ctx)
	}
	return pgtest.StartLocal(ctx, opts)
}

// needNet stops a test that needs a network lab (a partition lab, the pooler network)
// where none could be made (made is false): it is skipped with why, or fails under
// CI=true. A slow test is also skipped under -short.
func needNet(t *testing.T, made bool, why error, slow bool) {
	t.Helper()
	if slow && testing.Short() {
		t.Skip("-short: a slow fault test (tens of seconds); CI runs it")
	}
	if made {
		return
	}
	if pgtest.InCI() {
		t.Fatalf("this test needs its network lab under CI=true: %v", why)
	}
	t.Skipf("skipped: %v", why)
}

// dsn returns the server's DSN; without a server the test skips, or fails under CI.
func dsn(t testing.TB) string {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	return srv.DSN()
}

func newManager(t testing.TB, extra string, opts ...advisory.Option) *advisory.Manager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := advisory.New(ctx, pgtest.WithPairs(dsn(t), strings.Fields(extra)...), opts...)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// holderOf returns the pid of the backend holding key, or 0.
func holderOf(t testing.TB, key advisory.Key) uint32 {
	t.Helper()
	var pid uint32
	err := admin.QueryRow(context.Background(), `
		SELECT coalesce(max(pid), 0) FROM pg_locks WHERE locktype = 'advisory' AND granted
		  AND objsubid = 1 AND classid = $1 AND objid = $2`, uint32(uint64(key)>>32), uint32(key)).Scan(&pid)
	require.NoError(t, err)
	return pid
}

// waiters returns how many backends wait for key.
func waiters(t testing.TB, key advisory.Key) int {
	t.Helper()
	var n int
	err := admin.QueryRow(context.Background(), `
		SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
		  AND objsubid = 1 AND classid = $1 AND objid = $2`, uint32(uint64(key)>>32), uint32(key)).Scan(&n)
	require.NoError(t, err)
	return n
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
