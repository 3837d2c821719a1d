package main_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestRunDrainsAKilledHoldersMigration: four runs of a slow psql migration at once; the
// holder's pgadvisory is SIGKILLed while its migration's transaction runs (the kernel
// kills psql with it, but its backend would run the transaction to its COMMIT). In each
// of three rounds the dead transaction never commits, its backend is gone before the
// next holder's command issues its first statement (by the server's clock), no holder's
// sessions overlap another's, the migration is applied exactly once, the surviving runs
// exit 0 and the next holder says what it drained. In the third round the workers turn
// client_connection_check_interval off (as on PostgreSQL 12 and 13, which lack it): the
// dead backend cannot notice its client is gone, and the drain must terminate it.
func TestRunDrainsAKilledHoldersMigration(t *testing.T) {
	t.Parallel()
	needPsql(t)
	migrationSchema(t)
	for round := 1; round <= 3; round++ {
		mr := migrationRound{name: fmt.Sprintf("drain-r%d", round), workers: 4}
		mr.pattern = "pgadv/% " + mr.name + "-w%"
		if round == 3 {
			mr.env = []string{"PGOPTIONS=-c client_connection_check_interval=0"} // after ours: it wins
		}
		// The rounds are apart (a lock, tables, sessions' names of their own): at once.
		t.Run(mr.name, func(t *testing.T) {
			t.Parallel()
			res := mr.run(t)
			line := requireDrained(t, mr, res)
			if round == 3 {
				assert.Contains(t, line, "): terminated, gone ", "%s: the drain terminated the dead backend", mr.name)
			}
		})
	}
}

// requireDrained asserts what TestRunDrainsAKilledHoldersMigration promises of a round,
// and returns the next holder's line about the killed holder's backend.
func requireDrained(t *testing.T, mr migrationRound, res roundResult) string {
	t.Helper()
	for i, r := range res.results {
		want := 0
		if i == res.killed {
			want = 128 + 9 // SIGKILL
		}
		assert.Equal(t, want, r.code, "%s worker %d: %s", mr.name, i, r.stderr)
	}
	starts, commits := res.of("start"), res.of("commit")
	require.Len(t, starts, mr.workers, "%s: every command started once: %v", mr.name, res.rows)
	require.Equal(t, res.deadPID, starts[0].pid, "%s: the killed holder's command ran first", mr.name)
	for _, s := range starts {
		assert.True(t, strings.HasPrefix(s.app, "pgadv/"), "%s: a command's session is tagged: %q", mr.name, s.app)
	}
	require.Len(t, commits, 1, "%s: the migration was applied exactly once: %v", mr.name, res.rows)
	assert.Equal(t, starts[1].pid, commits[0].pid, "%s: by the next holder, not the dead one", mr.name)
	assert.Equal(t, 1, res.applied, mr.name)
	assert.True(t, res.hasPrice, mr.name)

	dead, ok := res.seen[res.deadPID]
	require.True(t, ok, "%s: the observer saw the killed holder's backend", mr.name)
	margin := starts[1].ts.Sub(dead.last)
	assert.Positive(t, margin, "%s: the killed holder's backend was still running %v after the next "+
		"holder's command issued its first statement", mr.name, -margin)
	requireNoOverlap(t, mr.name, starts, res.seen)

	next := res.results[mr.worker(starts[1].app)]
	assert.Contains(t, next.stderr, fmt.Sprintf("an earlier holder's session was still running: backend pid %d (",
		res.deadPID), "%s: the next holder reports the drain", mr.name)
	assertTerminalSafe(t, next.stderr)
	line := drainLine(next.stderr, res.deadPID)
	t.Logf("%s: killed holder's backend last seen %.1f ms before the next holder's first statement; next holder: %s",
		mr.name, float64(margin.Microseconds())/1000, line)
	return line
}

// requireNoOverlap asserts that no backend seen before a command's first statement (other
// than the command's own) was still seen after it: an earlier holder's work was over
// before the next holder's began.
func requireNoOverlap(t *testing.T, round string, starts []migrationRow, seen map[uint32]backendSeen) {
	t.Helper()
	for _, s := range starts[1:] {
		for pid, b := range seen {
			if pid != s.pid && b.first.Before(s.ts) {
				assert.True(t, b.last.Before(s.ts), "%s: backend %d (%q) was seen %v after backend %d's "+
					"command issued its first statement", round, pid, b.app, b.last.Sub(s.ts), s.pid)
			}
		}
	}
}

// drainLine is the line of stderr that reports the drain of backend pid.
func drainLine(stderr string, pid uint32) string {
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, fmt.Sprintf("backend pid %d (", pid)) && strings.Contains(line, "earlier holder") {
			return line
		}
	}
	return "(no drain reported)"
}

// leaveWorkBehind makes a run of key (as the test server's superuser) whose command
// leaves a session of its work running after the run ended: a psql connected to
// workDSN, in the background with the lock's descriptor closed, in pg_sleep(60). It
// returns that session's pid; the session is terminated when the test ends.
func leaveWorkBehind(t *testing.T, key, workDSN string) uint32 {
	t.Helper()
	marker := strings.ReplaceAll(t.Name(), "/", "_")
	script := `psql -X -q -d "$1" -c "SELECT pg_sleep(60), '$2'" >/dev/null 2>&1 3>&- &`
	r := cli(t, "run", "--name", key, "--", "sh", "-c", script, "sh", workDSN, marker)
	require.Equal(t, 0, r.code, r.stderr)
	var pid uint32
	var app string
	require.Eventually(t, func() bool {
		return adminQuery(t, `SELECT pid, application_name FROM pg_stat_activity
			WHERE query LIKE '%pg_sleep(60)%' AND query LIKE '%'||$1||'%' AND pid <> pg_backend_pid()`, marker).
			Scan(&pid, &app) == nil
	}, 20*time.Second, 10*time.Millisecond, "the earlier holder's session never showed up")
	t.Cleanup(func() { pgxExec(t, fmt.Sprintf("SELECT pg_terminate_backend(%d)", pid)) })
	require.True(t, strings.HasPrefix(app, "pgadv/"), app)
	return pid
}

// backendAlive reports whether backend pid is in pg_stat_activity.
func backendAlive(t *testing.T, pid uint32) bool {
	t.Helper()
	var alive bool
	require.NoError(t, adminQuery(t, "SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&alive))
	return alive
}

// TestRunRefusesToStartWhenItMayNotDrain: an earlier holder (a superuser) left a session
// of its work running. A run as a LOGIN-only role does not cover the superuser's sessions:
// it says it ignored it and starts. Told with --work-role that the work runs as that
// role, it exits 77 with the remedy, without starting its command, and releases the lock.
// A superuser's run then terminates the session (--drain-wait 0) and starts, and says so
// even with --quiet.
func TestRunRefusesToStartWhenItMayNotDrain(t *testing.T) {
	t.Parallel()
	needPsql(t)
	_, roleDSN := tempRole(t, "drainer")
	pid := leaveWorkBehind(t, t.Name(), dsn(t))
	var super string
	require.NoError(t, adminQuery(t, "SELECT current_user").Scan(&super))

	started := t.TempDir() + "/started"
	r := wait(t, startEnv(t, []string{"DATABASE_URL=" + roleDSN}, "run", "--drain-wait", "200ms",
		"--name", t.Name(), "--", "touch", started))
	assert.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, started)
	assert.Contains(t, r.stderr, fmt.Sprintf(`ignored a session that carries the lock's work tag: backend pid %d (`, pid))
	assert.True(t, backendAlive(t, pid), "nothing was terminated")
	require.NoError(t, os.Remove(started))

	r = wait(t, startEnv(t, []string{"DATABASE_URL=" + roleDSN}, "run", "--drain-wait", "200ms",
		"--work-role", super, "--name", t.Name(), "--", "touch", started))
	assert.Equal(t, 77, r.code, r.stderr)
	assert.NoFileExists(t, started, "the command never started")
	assert.Contains(t, r.stderr, fmt.Sprintf("backend pid %d (", pid))
	assert.Contains(t, r.stderr, "still running")
	assert.Contains(t, r.stderr, "GRANT pg_signal_backend", "the remedy")
	assert.Contains(t, r.stderr, "superuser", "the remedy for a superuser's session")
	assert.Contains(t, r.stderr, "the command was not started")
	assert.NotContains(t, r.stderr, breakPassword)
	assert.Empty(t, holders(t, advisory.KeyOf(t.Name())), "the lock was released")
	assert.True(t, backendAlive(t, pid), "nothing was terminated")

	r = cli(t, "run", "--quiet", "--drain-wait", "0", "--name", t.Name(), "--", "touch", started)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.FileExists(t, started)
	assert.Regexp(t, fmt.Sprintf(`backend pid %d \(.*\): terminated, gone \S+ after the drain began`, pid), r.stderr)
	assert.False(t, backendAlive(t, pid))
}

// TestRunSignalEndsTheDrain: SIGTERM while run waits for an earlier holder's session to
// end (--drain-wait 1m) ends run at once: 143, the command not started, the lock
// released, the session left alone.
func TestRunSignalEndsTheDrain(t *testing.T) {
	t.Parallel()
	needPsql(t)
	pid := leaveWorkBehind(t, t.Name(), dsn(t))
	m, _ := holdLock(t, t.Name()+"/observer", "")
	started := t.TempDir() + "/started"
	p := start(t, "run", "--drain-wait", "1m", "--holder-name", "drain-interrupted", "--name", t.Name(),
		"--", "touch", started)
	waitHeldByApp(t, m, t.Name(), "drain-interrupted")
	sent := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r := wait(t, p)
	assert.Equal(t, 143, r.code, r.stderr)
	assert.Less(t, time.Since(sent), 5*time.Second, "ended at once, not after the drain wait")
	assert.Contains(t, r.stderr, "interrupted by SIGTERM")
	assert.Contains(t, r.stderr, "the command was not started")
	assert.NoFileExists(t, started)
	assert.Empty(t, holders(t, advisory.KeyOf(t.Name())), "the lock was released")
	assert.True(t, backendAlive(t, pid), "the session was left alone")
}

// TestRunDrainsWorkInAnotherDatabase: a command's session in another database of the
// server carries the lock's tag too, and the next holder drains it.
func TestRunDrainsWorkInAnotherDatabase(t *testing.T) {
	t.Parallel()
	needPsql(t)
	db := fmt.Sprintf("drain_other_%d", rand.Uint32())
	// From template0, which no session holds open: a forger's session in template1 (a
	// parallel test's) would make a copy of template1 fail.
	_, err := pgxExec(t, "CREATE DATABASE "+db+" TEMPLATE template0")
	require.NoError(t, err)
	// DROP DATABASE waits up to 5 s for the session, terminated by then, to go.
	t.Cleanup(func() { pgxExec(t, "DROP DATABASE IF EXISTS "+db) })
	pid := leaveWorkBehind(t, t.Name(), pgtest.WithPairs(dsn(t), "dbname="+db))
	r := cli(t, "run", "--drain-wait", "0", "--name", t.Name(), "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, fmt.Sprintf(`backend pid %d \(.*\): terminated, gone \S+ after the drain began`, pid), r.stderr)
	assert.False(t, backendAlive(t, pid))
}
