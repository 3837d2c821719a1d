package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// srv is the package's PostgreSQL (see internal/pgtest); nil if none could be started
// outside CI. admin is a plain pool on it for observing pg_locks and terminating backends.
var (
	srv      *pgtest.Server
	startErr error
	admin    *pgxpool.Pool
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

// testParallel is the package's default -parallel: its tests mostly wait on the server
// (round trips, lock waits, loss detection), so more of them run at once than there are
// CPUs; under -short, testShortParallel, so that the long tests that wait on timers start
// early in the parallel phase (root package alone, 2 cores: 46 s with 8, 40 s with 16,
// 38 s with 32). An explicit -parallel wins.
const (
	testParallel      = 8
	testShortParallel = 16
)

func runTests(m *testing.M) int {
	return pgtest.Suite{Srv: &srv, Err: &startErr, Admin: &admin, Setup: setup, Parallel: testParallel,
		ShortParallel: testShortParallel}.Run(m)
}

// setup points internal tests (package advisory) at the server through the environment,
// and the examples through DATABASE_URL, as a user's program would.
func setup(_ context.Context, s *pgtest.Server) (func(), error) {
	os.Setenv(pgtest.EnvDSN, s.DSN())
	os.Setenv("DATABASE_URL", s.DSN())
	return nil, nil
}

// dsn returns the test server's connection string with extra key=value settings.
// Without a server the test is skipped, except under CI=true where it fails.
func dsn(t testing.TB, extra ...string) string {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	return pgtest.WithPairs(srv.DSN(), extra...)
}

// newManager returns a Manager on the test server, closed when the test ends.
func newManager(t testing.TB, extra []string, opts ...advisory.Option) *advisory.Manager {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := advisory.New(ctx, dsn(t, extra...), opts...)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	return m
}

// lockRow is one pg_locks row of an advisory lock.
type lockRow struct {
	PID     uint32
	Granted bool
}

// lockRows returns the pg_locks rows for key (bigint form), holders first.
func lockRows(t testing.TB, key advisory.Key) []lockRow {
	t.Helper()
	out, err := queryLockRows(context.Background(), key)
	require.NoError(t, err)
	return out
}

// queryLockRows is lockRows without a test to fail: it may run on any goroutine.
func queryLockRows(ctx context.Context, key advisory.Key) ([]lockRow, error) {
	rows, err := admin.Query(ctx, `
		SELECT pid, granted FROM pg_locks
		WHERE locktype = 'advisory' AND objsubid = 1
		  AND classid = $1 AND objid = $2 AND database = (SELECT oid FROM pg_database WHERE datname = current_database())
		ORDER BY granted DESC, pid`, uint32(uint64(key)>>32), uint32(key))
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []lockRow
	for rows.Next() {
		var r lockRow
		if err := rows.Scan(&r.PID, &r.Granted); err != nil {
			return nil, err
		}
		out = append(out, r)
	}
	return out, rows.Err()
}

// requireHeldBy asserts that exactly one backend holds key and it is pid.
func requireHeldBy(t testing.TB, key advisory.Key, pid uint32) {
	t.Helper()
	var holders []uint32
	for _, r := range lockRows(t, key) {
		if r.Granted {
			holders = append(holders, r.PID)
		}
	}
	require.Equal(t, []uint32{pid}, holders, "holders of key %d", key)
}

// requireFree asserts that no backend holds or waits for key.
func requireFree(t testing.TB, key advisory.Key) {
	t.Helper()
	require.Empty(t, lockRows(t, key), "pg_locks rows of key %d", key)
}

// waitForWaiters blocks until n backends wait (granted = false) for key. If they do not
// within 10 s it fails, saying what the server shows (lockScene).
func waitForWaiters(t testing.TB, key advisory.Key, n int) {
	t.Helper()
	if !within(10*time.Second, time.Millisecond, func() bool { return waiters(t, key) == n }) {
		t.Fatalf("not within 10s: waiting for %d waiters on key %d; %s", n, key, lockScene(t, key))
	}
}

// lockScene describes, for a failure message, key's rows in pg_locks and each client
// backend of the test database (backendActivity), one per line.
func lockScene(t testing.TB, key advisory.Key) string {
	t.Helper()
	rows, err := admin.Query(context.Background(), `SELECT pid FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND datname = current_database() AND pid <> pg_backend_pid()
		ORDER BY pid`)
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	require.NoError(t, err)
	var b strings.Builder
	fmt.Fprintf(&b, "pg_locks %+v; the server's client backends:", lockRows(t, key))
	for _, pid := range pids {
		fmt.Fprintf(&b, "\n  %d: %s", pid, backendActivity(t, uint32(pid)))
	}
	return b.String()
}

// backendActivity describes a backend as pg_stat_activity shows it.
func backendActivity(t testing.TB, pid uint32) string {
	t.Helper()
	var app, state, wait, query string
	err := admin.QueryRow(context.Background(), `SELECT coalesce(application_name, ''), coalesce(state, ''),
		coalesce(wait_event_type || '/' || wait_event, ''), coalesce(query, '')
		FROM pg_stat_activity WHERE pid = $1`, int32(pid)).Scan(&app, &state, &wait, &query)
	if errors.Is(err, pgx.ErrNoRows) {
		return "gone from pg_stat_activity"
	}
	require.NoError(t, err)
	return fmt.Sprintf("application_name %q, state %q, wait %q, last query %q", app, state, wait, query)
}

// terminate runs pg_terminate_backend(pid).
func terminate(t testing.TB, pid uint32) {
	t.Helper()
	var ok bool
	require.NoError(t, admin.QueryRow(context.Background(), "SELECT pg_terminate_backend($1)", int32(pid)).Scan(&ok))
	require.True(t, ok, "pg_terminate_backend(%d)", pid)
}

// requireNoAcquired asserts the Manager's pool has no connection out: nothing leaked.
func requireNoAcquired(t testing.TB, m *advisory.Manager) {
	t.Helper()
	require.Eventually(t, func() bool { return m.Stat().AcquiredConns() == 0 },
		5*time.Second, time.Millisecond, "acquired connections: %d", m.Stat().AcquiredConns())
}

// ctxT returns a context bounded by a generous test timeout.
func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// within calls cond until it returns true (within reports true) or limit has passed
// (false). It waits tick after the first call, then twice as long after each further one,
// up to pollCap (or tick, if longer): a condition met at once costs one round trip, one
// that takes long costs a poll every few milliseconds instead of one every millisecond (8
// tests polling pg_locks at once kept the server busy). Unlike assert.Eventually it calls
// cond on the test's own goroutine, so cond may use require, and no call outlives the test.
func within(limit, tick time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	most := max(tick, pollCap)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(tick)
		tick = min(2*tick, most)
	}
	return true
}

// pollCap is the longest wait between two polls of within that began with a shorter tick.
const pollCap = 4 * time.Millisecond

// inShort returns short under -short (go test -short: the inner loop), full otherwise: the
// number of trials, or the duration, of a randomized test whose every trial checks the
// same invariant. The full run (go test ./..., CI) keeps the full count.
func inShort[T any](full, short T) T {
	if testing.Short() {
		return short
	}
	return full
}

// subtest is one subtest for runAtOnce.
type subtest struct {
	name string
	fn   func(t *testing.T)
}

// runAtOnce runs the subtests of t all at once, each on its own goroutine, and returns
// when they have all ended. They share t's place among the -parallel tests: subtests that
// called t.Parallel would each queue for a place of their own behind every top-level test
// already waiting (some 200), and start last, so that tests spending seconds on timers
// (an idle reaper's) ended the package's run. Not for subtests that spend CPU (round trips
// by the hundred): started early, in the thick of the run, they took 4 to 8 times longer
// (TestPgpoolNeverLocksOnTheStandby's, 66 to 113 s instead of 7 to 17, past their bound).
func runAtOnce(t *testing.T, subtests ...subtest) {
	t.Helper()
	done := make(chan struct{}, len(subtests))
	for _, st := range subtests {
		go func() {
			defer func() { done <- struct{}{} }()
			t.Run(st.name, st.fn)
		}()
	}
	for range subtests {
		<-done
	}
}

// eventually fails the test unless cond returns true within limit. Like within, it calls
// cond on the test's goroutine, so cond may use require (require.Eventually runs cond on
// another goroutine, where a failing require panics the test binary).
func eventually(t testing.TB, limit time.Duration, cond func() bool, format string, args ...any) {
	t.Helper()
	if !within(limit, time.Millisecond, cond) {
		t.Fatalf("not within %v: "+format, append([]any{limit}, args...)...)
	}
}
