package pgtest_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestSyncPairLosesACancelledCommitOnFailover: the pair is what it claims. With the
// synchronous standby up a commit returns at once; with it down a commit waits, and a
// cancelled wait (a ctx ending, sent as a CancelRequest: statement_timeout is off during
// COMMIT) reports success with a WARNING while the row is
// only on the primary. After a crash of the primary and the promotion of the standby that
// row is gone; the old primary, rebuilt, is the new synchronous standby; the nodes' roles
// and ports are swapped.
func TestSyncPairLosesACancelledCommitOnFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts two servers and fails over")
	}
	p := pgtest.SyncPairForTest(t)
	ctx := ctxT(t)
	first := p.PrimaryIndex()
	var notices noticeLog
	conn := connectNoticed(t, p.PrimaryDSN(), &notices)
	_, err := conn.Exec(ctx, "CREATE TABLE pair (v int); INSERT INTO pair VALUES (1)")
	require.NoError(t, err, "with the standby up")

	p.StopStandby()
	short, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel()
	began := time.Now()
	_, err = conn.Exec(short, "INSERT INTO pair VALUES (2)")
	took := time.Since(began)
	require.NoError(t, err, "a cancelled replication wait reports success")
	assert.GreaterOrEqual(t, took, 300*time.Millisecond, "the commit waited for the standby")
	assert.Contains(t, notices.String(), "canceling wait for synchronous replication")
	assert.Equal(t, []int{1, 2}, values(t, conn), "committed locally")

	p.CrashPrimary()
	require.NoError(t, p.Promote(ctx))
	assert.Equal(t, 1-first, p.PrimaryIndex())
	assert.Equal(t, p.DSN(1-first), p.PrimaryDSN())
	promoted := connectNoticed(t, p.PrimaryDSN(), &notices)
	assert.Equal(t, []int{1}, values(t, promoted), "the unreplicated commit is gone")

	require.NoError(t, p.Rebuild(ctx))
	assert.Equal(t, p.DSN(first), p.StandbyDSN())
	_, err = promoted.Exec(ctx, "INSERT INTO pair VALUES (3)")
	require.NoError(t, err, "the rebuilt node confirms commits")
	assert.Equal(t, []int{1, 3}, values(t, promoted))
}

// noticeLog collects the notices (and warnings) a connection receives.
type noticeLog struct {
	mu   sync.Mutex
	msgs []string
}

func (n *noticeLog) add(_ *pgconn.PgConn, notice *pgconn.Notice) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.msgs = append(n.msgs, notice.Severity+": "+notice.Message)
}

func (n *noticeLog) String() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return strings.Join(n.msgs, "\n")
}

func connectNoticed(t testing.TB, dsn string, notices *noticeLog) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.OnNotice = notices.add
	cfg.BuildContextWatcherHandler = func(pc *pgconn.PgConn) ctxwatch.Handler {
		return &pgconn.CancelRequestContextWatcherHandler{Conn: pc, DeadlineDelay: 10 * time.Second}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func values(t testing.TB, conn *pgx.Conn) []int {
	t.Helper()
	rows, err := conn.Query(context.Background(), "SELECT v FROM pair ORDER BY v")
	require.NoError(t, err)
	vs, err := pgx.CollectRows(rows, pgx.RowTo[int])
	require.NoError(t, err)
	return vs
}
