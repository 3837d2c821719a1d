package advgocron_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advgocron "github.com/pgadvisory/advisory/contrib/gocron"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// loginRole creates a LOGIN-only role (no pg_signal_backend), dropped with its sessions
// when the test ends, and returns its name and a DSN that logs in as it.
func loginRole(t *testing.T, prefix string) (string, string) {
	t.Helper()
	ctx := context.Background()
	role := fmt.Sprintf("%s_%d", prefix, rand.Uint32())
	_, err := admin.Exec(ctx, "CREATE ROLE "+role+" LOGIN PASSWORD 'pw'")
	require.NoError(t, err)
	t.Cleanup(func() {
		admin.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", role)
		eventually(t, 10*time.Second, func() bool {
			var n int
			require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE usename = $1", role).Scan(&n))
			return n == 0
		}, "the role's sessions gone")
		_, err := admin.Exec(ctx, "DROP ROLE "+role)
		require.NoError(t, err)
	})
	return role, pgtest.WithPairs(dsn(t), "user="+role, "password=pw")
}

// managerAs returns a Manager that logs in with roleDSN, closed when the test ends.
func managerAs(t *testing.T, roleDSN string, opts ...advisory.Option) *advisory.Manager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := advisory.New(ctx, roleDSN, opts...)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// TestElectorIgnoresAForgedTag (issue 37, items 1 and 5): replicas that run as a
// LOGIN-only role meet a session of another role whose application_name carries a
// forged work tag of the elector's lock. The Elector leads; it used to stop for good
// with "elector stopped: ... an earlier holder's work is still running".
func TestElectorIgnoresAForgedTag(t *testing.T) {
	t.Parallel()
	name := t.Name()
	var oid uint32
	require.NoError(t, admin.QueryRow(context.Background(),
		"SELECT oid FROM pg_database WHERE datname = current_database()").Scan(&oid))
	tag := "pgadv/" + strconv.FormatUint(uint64(oid), 36) + "/" + strconv.FormatUint(uint64(advisory.KeyOf(name)), 36) + "/1.aaaaaa"
	_, forgerDSN := loginRole(t, "forger")
	c, err := pgx.Connect(context.Background(), pgtest.WithPairs(forgerDSN, "dbname=template1", "application_name="+tag))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })

	_, holderDSN := loginRole(t, "replica")
	e, err := advgocron.NewElector(managerAs(t, holderDSN), name, 0)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	eventually(t, 10*time.Second, func() bool { return e.IsLeader(context.Background()) == nil }, "the elector leads")
	require.NoError(t, c.Ping(context.Background()), "the forger's session was left alone")
}

// TestElectorCampaignsThroughAFailedDrain (issue 37, item 5): the replicas lock as one
// role and work as another (WithWorkRoles), without the privilege to terminate its
// sessions; an earlier leader's work session runs on, so every drain fails. The Elector
// keeps campaigning (IsLeader says ErrNotLeader, never "stopped") and leads once the
// session has ended. Lead used to return at the first failed drain, and the Elector
// stopped for good.
func TestElectorCampaignsThroughAFailedDrain(t *testing.T) {
	t.Parallel()
	name := t.Name()
	_, holderDSN := loginRole(t, "replica")
	worker, workerDSN := loginRole(t, "worker")
	first := managerAs(t, holderDSN)
	l, err := first.Lock(context.Background(), name)
	require.NoError(t, err)
	work, err := l.WorkConnString(workerDSN)
	require.NoError(t, err)
	c, err := pgx.Connect(context.Background(), work)
	require.NoError(t, err)
	t.Cleanup(func() { c.Close(context.Background()) })
	var workPID uint32
	require.NoError(t, c.QueryRow(context.Background(), "SELECT pg_backend_pid()").Scan(&workPID))
	terminate(t, l.PID())
	<-l.Done()

	e, err := advgocron.NewElector(managerAs(t, holderDSN, advisory.WithDrainWait(0), advisory.WithWorkRoles(worker)), name, 0)
	require.NoError(t, err)
	t.Cleanup(e.Close)
	for deadline := time.Now().Add(time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		require.ErrorIs(t, e.IsLeader(context.Background()), advgocron.ErrNotLeader, "still campaigning")
	}
	terminate(t, workPID)
	eventually(t, 10*time.Second, func() bool { return e.IsLeader(context.Background()) == nil }, "the elector leads")
}
