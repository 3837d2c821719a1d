package main_test

import (
	"context"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// intervalScript appends "start NS" and "end NS" (nanoseconds) to $1 around a sleep.
const intervalScript = `echo "start $(date +%s%N)" >> "$1"; sleep 0.3; echo "end $(date +%s%N)" >> "$1"`

type interval struct{ start, end int64 }

func readIntervals(t *testing.T, files []string) []interval {
	var out []interval
	for _, f := range files {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		fields := strings.Fields(string(b))
		require.Len(t, fields, 4, "%s: %q", f, b)
		s, _ := strconv.ParseInt(fields[1], 10, 64)
		e, _ := strconv.ParseInt(fields[3], 10, 64)
		out = append(out, interval{s, e})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].start < out[j].start })
	return out
}

func TestRunSerializesCommands(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var procs []*proc
	var files []string
	for i := 0; i < 3; i++ {
		f := filepath.Join(dir, strconv.Itoa(i))
		files = append(files, f)
		procs = append(procs, start(t, "run", "--name", t.Name(), "--", "sh", "-c", intervalScript, "sh", f))
	}
	for _, p := range procs {
		r := wait(t, p)
		require.Equal(t, 0, r.code, r.stderr)
	}
	iv := readIntervals(t, files)
	for i := 1; i < len(iv); i++ {
		assert.Less(t, iv[i-1].end, iv[i].start, "command intervals overlap: %v", iv)
	}
}

// meetScript creates $1, then waits (up to 60 s) for $2 to exist: it exits 0 only if the
// other command started while this one was running.
const meetScript = `touch "$1"; i=0; while [ ! -e "$2" ] && [ $i -lt 600 ]; do sleep 0.1; i=$((i+1)); done; [ -e "$2" ]`

// Shared holders run together: each command waits until the other has started, so both
// exit 0 only if the second was let in while the first still held the lock. No timing
// is assumed: under any load, exclusive holders could not both succeed.
func TestRunSharedCommandsOverlap(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
	pa := start(t, "run", "--shared", "--name", t.Name(), "--", "sh", "-c", meetScript, "sh", a, b)
	pb := start(t, "run", "--shared", "--name", t.Name(), "--", "sh", "-c", meetScript, "sh", b, a)
	ra, rb := wait(t, pa), wait(t, pb)
	require.Equal(t, 0, ra.code, "shared holders run together: %s", ra.stderr)
	require.Equal(t, 0, rb.code, "shared holders run together: %s", rb.stderr)
}

func TestRunNoWaitNamesTheHolder(t *testing.T) {
	t.Parallel()
	_, l := holdLock(t, t.Name(), "application_name=the-holder")
	r := cli(t, "run", "--no-wait", "--name", t.Name(), "--", "true")
	require.Equal(t, 75, r.code)
	assert.Contains(t, r.stderr, "not waiting (--no-wait)")
	assert.Contains(t, r.stderr, "backend pid "+strconv.Itoa(int(l.PID())))
	assert.Contains(t, r.stderr, `"the-holder"`)
	assert.Less(t, r.took, 10*time.Second)
}

func TestRunWaitElapses(t *testing.T) {
	t.Parallel()
	holdLock(t, t.Name(), "application_name=slow-holder")
	r := cli(t, "run", "--wait", "1500ms", "--name", t.Name(), "--", "true")
	require.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, "gave up on lock")
	assert.Contains(t, r.stderr, `waiting for lock "`+t.Name()+`"`, "reports the holder while waiting")
	assert.Contains(t, r.stderr, `"slow-holder"`)

	r = cli(t, "run", "--quiet", "--wait", "200ms", "--name", t.Name(), "--", "true")
	require.Equal(t, 75, r.code)
	assert.NotContains(t, r.stderr, "waiting for lock", "--quiet")
}

func TestRunPassesExitCodes(t *testing.T) {
	t.Parallel()
	for cmd, want := range map[string]int{"exit 0": 0, "exit 7": 7, "exit 75": 75, "kill -TERM $$": 128 + 15} {
		r := cli(t, "run", "--name", t.Name(), "--", "sh", "-c", cmd)
		assert.Equal(t, want, r.code, "%s: %s", cmd, r.stderr)
	}
	r := cli(t, "run", "--name", t.Name(), "--", "no-such-command-xyz")
	assert.Equal(t, 127, r.code)
	assert.Contains(t, r.stderr, "command not found")
	r = cli(t, "run", "--name", t.Name(), "--", "/etc/passwd")
	assert.Equal(t, 126, r.code)
}

func TestRunForwardsSignals(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		dir := t.TempDir()
		ready := filepath.Join(dir, "ready")
		script := `trap 'echo "got $1"; exit 3' ` + strings.TrimPrefix(signalName(sig), "SIG") +
			`; touch "$2"; while :; do sleep 0.05; done`
		p := start(t, "run", "--name", t.Name(), "--", "sh", "-c", script, "sh", signalName(sig), ready)
		require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 20*time.Second, 10*time.Millisecond)
		require.NoError(t, p.cmd.Process.Signal(sig))
		r := wait(t, p)
		assert.Equal(t, 3, r.code, "%v: the command's own exit code after its trap ran; stderr: %s", sig, r.stderr)
		assert.Contains(t, r.stdout, "got "+signalName(sig))
	}
}

func signalName(s syscall.Signal) string {
	return map[syscall.Signal]string{syscall.SIGTERM: "SIGTERM", syscall.SIGINT: "SIGINT", syscall.SIGHUP: "SIGHUP"}[s]
}

func TestRunStopsTheCommandWhenTheLockIsLost(t *testing.T) {
	t.Parallel()
	m, _ := holdLock(t, t.Name()+"/observer", "")
	dir := t.TempDir()
	ready, child := filepath.Join(dir, "ready"), filepath.Join(dir, "child")
	// The command starts a grandchild too: the whole process group must be stopped.
	script := `sleep 60 & echo $! > "$2"; touch "$1"; wait`
	p := start(t, "run", "--name", t.Name(), "--holder-name", t.Name(), "--grace", "2s", "--", "sh", "-c", script, "sh", ready, child)
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 20*time.Second, 10*time.Millisecond)
	h := waitHeldByApp(t, m, t.Name(), t.Name())
	assert.Equal(t, t.Name(), h.Name)

	var ok bool
	require.NoError(t, adminQuery(t, "SELECT pg_terminate_backend($1)", int32(h.PID)).Scan(&ok))
	r := wait(t, p)
	require.Equal(t, 76, r.code, r.stderr)
	assert.Contains(t, r.stderr, "lost while the command ran")
	assert.Contains(t, r.stderr, "57P01")
	assert.NotContains(t, r.stderr, "still running after", "SIGTERM to the process group was enough")
	assert.Less(t, r.took, 30*time.Second)
	b, err := os.ReadFile(child)
	require.NoError(t, err)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	assert.Eventually(t, func() bool { return syscall.Kill(pid, 0) != nil }, 5*time.Second, 10*time.Millisecond,
		"the command's background child was stopped too")
}

// adminQuery runs one query on a plain connection of its own.
func adminQuery(t testing.TB, sql string, args ...any) pgx.Row {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn(t))
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn.QueryRow(context.Background(), sql, args...)
}

// TestRunSaysWhenItTookTheLock (issue 37, item 7): run said "acquired ..." only after a
// wait, so a log showed when a holding began only if it had to wait. It says so in every
// mode (at once, --no-wait, --wait), and --quiet keeps it quiet.
func TestRunSaysWhenItTookTheLock(t *testing.T) {
	t.Parallel()
	for _, flags := range [][]string{nil, {"--no-wait"}, {"--wait", "10s"}, {"--quiet"}} {
		args := append(append([]string{"run", "--name", t.Name()}, flags...), "--", "echo", "ran")
		r := wait(t, start(t, args...))
		require.Equal(t, 0, r.code, "%q: %s", flags, r.stderr)
		assert.Equal(t, "ran\n", r.stdout)
		if len(flags) == 1 && flags[0] == "--quiet" {
			assert.Empty(t, r.stderr)
			continue
		}
		assert.Equal(t, `pgadvisory: acquired lock "`+t.Name()+`" without waiting`+"\n", r.stderr, "%q", flags)
	}
}

func TestRunUsageErrors(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"run", "--", "true"},  // no --name or --key
		{"run", "--name", "k"}, // no command
		{"run", "--name", "k", "--wait", "1s", "--no-wait", "--", "true"},
		{"run", "--name", "", "--", "true"},
		{"run", "--name", "bad\xff", "--", "true"},
		{"run", "--bogus", "--name", "k", "--", "true"},
		{"run", "--name", "k", "--wait", "-1s", "--", "true"},
		{"nosuchcommand"},
		{},
	} {
		r := cli(t, args...)
		assert.Equal(t, 64, r.code, "%q: %s", args, r.stderr)
		assert.NotEmpty(t, r.stderr, "%q says why", args)
	}
}

func TestRunUnreachableServer(t *testing.T) {
	t.Parallel()
	r := cli(t, "run", "--dsn", "postgres://someone:s3cret@127.0.0.1:1/db?connect_timeout=2", "--name", "k",
		"--connect-timeout", "1s", "--", "true")
	assert.Equal(t, 69, r.code, r.stderr)
	assert.Contains(t, r.stderr, "cannot connect to 127.0.0.1:1 (user someone, database db) yet: connection refused; retrying")
	assert.Contains(t, r.stderr, "(still failing after 1s of retries, --connect-timeout)")
	assert.NotContains(t, r.stderr+r.stdout, "s3cret", "the password is never printed")
}

// TestRunReportsTheHolderOnceWhileItStaysTheSame: the holder's age changes every second,
// its identity does not: a 3.5 s wait reports once (at ~1 s), not every second.
func TestRunReportsTheHolderOnceWhileItStaysTheSame(t *testing.T) {
	t.Parallel()
	holdLock(t, t.Name(), "application_name=steady-holder")
	r := cli(t, "run", "--wait", "3500ms", "--name", t.Name(), "--", "true")
	require.Equal(t, 75, r.code, r.stderr)
	assert.Equal(t, 1, strings.Count(r.stderr, "waiting for lock"), r.stderr)
	assert.Contains(t, r.stderr, `"steady-holder"`)
}

// TestRunReportsAChangeOfHolder: a new application_name of the holding session is reported
// at the next check (every second), well before the 10 s repeat.
func TestRunReportsAChangeOfHolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn(t)+" application_name=holder-a")
	require.NoError(t, err)
	t.Cleanup(func() { conn.Close(ctx) })
	_, err = conn.Exec(ctx, "SELECT pg_advisory_lock(hashtextextended($1, 0))", t.Name())
	require.NoError(t, err)

	p := start(t, "run", "--wait", "1m", "--name", t.Name(), "--", "true")
	p.stderr.waitFor(t, `"holder-a"`, 20*time.Second)
	_, err = conn.Exec(ctx, "SET application_name = 'holder-b'")
	require.NoError(t, err)
	changed := time.Now()
	p.stderr.waitFor(t, `"holder-b"`, 20*time.Second)
	assert.Less(t, time.Since(changed), 8*time.Second, "reported on change, not at the 10 s repeat")

	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 130, wait(t, p).code)
}
