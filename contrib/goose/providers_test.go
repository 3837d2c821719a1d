package advgoose_test

import (
	"bytes"
	"context"
	"database/sql"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advgoose "github.com/pgadvisory/advisory/contrib/goose"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// envVictim carries the database a re-executed test binary migrates as the victim of
// TestFiveProvidersOneSIGKILLed; envVictimPooled says it goes through PgBouncer.
const (
	envVictim       = "ADVGOOSE_VICTIM_DSN"
	envVictimPooled = "ADVGOOSE_VICTIM_POOLED"
)

// victimMain is the SIGKILLed Provider: it migrates with a SessionLocker, migration 2
// sleeping a minute, and is killed during that sleep.
func victimMain() int {
	dsn := os.Getenv(envVictim)
	ctx := context.Background()
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "victim:", err)
		return 1
	}
	defer m.Close()
	slowDSN := slow(dsn, 60, "victim")
	if os.Getenv(envVictimPooled) != "" { // no options through PgBouncer: see migrations
		slowDSN = pgtest.WithParams(dsn, map[string]string{"application_name": "victim sleep=8"})
	}
	db, err := sql.Open("pgx", slowDSN)
	if err != nil {
		fmt.Fprintln(os.Stderr, "victim:", err)
		return 1
	}
	lk := advgoose.New(m, "migrations")
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations, goose.WithSessionLocker(lk))
	if err != nil {
		fmt.Fprintln(os.Stderr, "victim:", err)
		return 1
	}
	ctx, cancel := lk.Context(ctx)
	defer cancel()
	_, err = p.Up(ctx)
	fmt.Fprintln(os.Stderr, "victim: Up returned (it should have been killed):", err)
	return 1
}

// Five goose Providers migrate one database at once; the first, in another process, is
// SIGKILLed in the middle of migration 2, whose backend goes on sleeping in a transaction
// nobody will commit. One of the four others takes over, drains that backend (it was
// tagged by SessionLock) and applies migrations 2 and 3; each is applied exactly once,
// long before the dead backend's sleep would have ended.
func TestFiveProvidersOneSIGKILLed(t *testing.T) {
	dsn, admin := database(t)
	var logs lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logs, nil))
	deadPID, took := fiveProviders(t, dsn, admin, nil, func() *advisory.Manager {
		return newManager(t, dsn, advisory.WithLogger(logger))
	}, func() int32 { return sleepingBackend(t, admin, "victim") })
	require.Zero(t, count(t, admin, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", deadPID))
	require.Less(t, took, 20*time.Second, "the dead backend's minute of sleep was not waited out")
	drained := logs.line("drained an earlier holder's session")
	require.Contains(t, drained, fmt.Sprintf("pid=%d ", deadPID), "the taker drained the dead backend")
	t.Logf("drain: %s", drained)
	t.Logf("after the SIGKILL, the survivors were done in %v (the dead backend %d would have slept 60 s)", took, deadPID)
}

// fiveProviders runs the victim (a re-executed test binary, with env added) and, once its
// migration 2 sleeps (sleeping returns its backend), four Providers on dsn with a
// SessionLocker of a Manager of newManager each; it SIGKILLs the victim once the four
// wait for the lock, and checks that migrations 2 and 3 were applied exactly once in all
// and the victim's migration 2 never committed. It returns the victim's backend and how
// long after the kill the four were done.
func fiveProviders(t *testing.T, dsn string, admin *pgxpool.Pool, env []string, newManager func() *advisory.Manager,
	sleeping func() int32) (int32, time.Duration) {
	ctx := context.Background()
	victim := exec.Command(os.Args[0], "-test.run=^$")
	victim.Env = append(append(os.Environ(), envVictim+"="+dsn), env...)
	victim.Stderr = os.Stderr
	require.NoError(t, victim.Start())
	t.Cleanup(func() { victim.Process.Kill(); victim.Wait() })
	deadPID := sleeping()
	results := make([]struct {
		n   int
		err error
	}, 4)
	var wg sync.WaitGroup
	for i := range results {
		p := newProvider(t, dsn, advgoose.New(newManager(), "migrations"), true)
		wg.Go(func() {
			rs, err := p.Up(ctx)
			results[i].n, results[i].err = len(rs), err
		})
	}
	waitFor(t, "4 Providers waiting for the lock", func() bool {
		return count(t, admin, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`) == 4
	})
	require.NoError(t, victim.Process.Kill())
	killed := time.Now()
	wg.Wait()
	took := time.Since(killed)
	applied := 0
	for i, r := range results {
		require.NoError(t, r.err, "provider %d", i)
		applied += r.n
		require.Contains(t, []int{0, 2}, r.n, "provider %d applied %d migrations", i, r.n)
	}
	require.Equal(t, 2, applied, "migrations 2 and 3 applied once in all")
	apps := appliedOnce(t, admin)
	require.Len(t, apps, 3)
	require.Contains(t, apps[1], "victim", "migration 1 committed by the victim")
	require.NotContains(t, apps[2], "victim", "the victim's migration 2 never committed")
	return deadPID, took
}

// lockedBuffer is a log destination for several goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// line returns the first line that contains s, or "".
func (b *lockedBuffer) line(s string) string {
	b.mu.Lock()
	defer b.mu.Unlock()
	for l := range strings.Lines(b.buf.String()) {
		if strings.Contains(l, s) {
			return strings.TrimSpace(l)
		}
	}
	return ""
}

// sleepingBackend waits until a backend whose application_name contains app runs
// migration 2's sleep, and returns its pid; that backend was tagged for the holding.
func sleepingBackend(t *testing.T, admin *pgxpool.Pool, app string) int32 {
	t.Helper()
	var pid int32
	waitFor(t, app+"'s migration 2 sleeping", func() bool {
		err := admin.QueryRow(context.Background(), `SELECT pid FROM pg_stat_activity
			WHERE application_name LIKE 'pgadv/%' AND application_name LIKE '%' || $1 || '%'
			AND state = 'active' AND query LIKE '%pg_sleep%'`, app).Scan(&pid)
		return err == nil
	})
	return pid
}

func count(t *testing.T, admin *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	require.NoError(t, admin.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// waitFor fails t unless cond holds within 60 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 60 s: %s", what)
		}
	}
}
