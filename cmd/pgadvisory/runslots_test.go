package main_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// holdScript records "start NS" in $1, creates $2 (running), waits (up to 120 s) for $3
// (go) to exist and records "end NS": the test decides when each command ends.
const holdScript = `echo "start $(date +%s%N)" >> "$1"; touch "$2"; i=0; ` +
	`while [ ! -e "$3" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; echo "end $(date +%s%N)" >> "$1"`

func exists(path string) bool { _, err := os.Stat(path); return err == nil }

// TestRunSlotsAtMostNAtOnce: three run --slots 2 commands that each hold until told. Two
// start, the third waits (it reports the semaphore full) and starts only after one of
// the first two was told to end and did; no timing is assumed.
func TestRunSlotsAtMostNAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	var procs []*proc
	var logs, running, gos []string
	for i := 0; i < 3; i++ {
		f := func(s string) string { return filepath.Join(dir, s+strconv.Itoa(i)) }
		logs, running, gos = append(logs, f("log")), append(running, f("running")), append(gos, f("go"))
		procs = append(procs, start(t, "run", "--slots", "2", "--name", t.Name(), "--holder-name", "slots-"+strconv.Itoa(i),
			"--", "sh", "-c", holdScript, "sh", logs[i], running[i], gos[i]))
	}
	started := func() []int {
		var s []int
		for i := range running {
			if exists(running[i]) {
				s = append(s, i)
			}
		}
		return s
	}
	require.Eventually(t, func() bool { return len(started()) == 2 }, 30*time.Second, 10*time.Millisecond)
	first := started()
	waiter := 3 - first[0] - first[1]
	procs[waiter].stderr.waitFor(t, "full (all 2 slots taken)", 20*time.Second)
	assert.Len(t, started(), 2, "a third command started while two held the slots")

	// End one holder: the waiter gets its slot.
	require.NoError(t, os.WriteFile(gos[first[0]], nil, 0o600))
	r := wait(t, procs[first[0]])
	require.Equal(t, 0, r.code, r.stderr)
	require.Eventually(t, func() bool { return exists(running[waiter]) }, 30*time.Second, 10*time.Millisecond)
	assert.Contains(t, procs[waiter].stderr.String(), `acquired semaphore "`+t.Name()+`" (2 slots) after waiting`)
	for _, i := range []int{first[1], waiter} {
		require.NoError(t, os.WriteFile(gos[i], nil, 0o600))
		r := wait(t, procs[i])
		require.Equal(t, 0, r.code, r.stderr)
	}
	// The recorded intervals: never more than 2 at once.
	iv := readIntervals(t, logs)
	for _, at := range iv {
		n := 0
		for _, o := range iv {
			if o.start <= at.start && at.start < o.end {
				n++
			}
		}
		assert.LessOrEqual(t, n, 2, "more than 2 commands ran at once: %v", iv)
	}
}

// holdSlots takes every slot of the semaphore name with limit slots through the library,
// for the test's duration.
func holdSlots(t *testing.T, name string, limit int) (*advisory.Semaphore, []*advisory.Lock) {
	t.Helper()
	ctx := context.Background()
	m, err := advisory.New(ctx, pgtest.WithPairs(dsn(t), "application_name=slot-holder"))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	sem, err := m.Semaphore(name, limit)
	require.NoError(t, err)
	var ls []*advisory.Lock
	for range limit {
		l, err := sem.TryAcquire(ctx)
		require.NoError(t, err)
		ls = append(ls, l)
	}
	return sem, ls
}

// TestRunSlotsNoWait: with every slot held, --no-wait exits 75 (or the
// --conflict-exit-code) at once and says the semaphore is full and who holds it; --wait
// gives up the same way; with one slot free, the command runs on it and gets its key.
func TestRunSlotsNoWait(t *testing.T) {
	t.Parallel()
	_, ls := holdSlots(t, t.Name(), 2)
	r := cli(t, "run", "--slots", "2", "--no-wait", "--name", t.Name(), "--", "true")
	require.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, `semaphore "`+t.Name()+`" (2 slots) is full (all 2 slots taken), held by`)
	assert.Contains(t, r.stderr, "not waiting (--no-wait)")
	assert.Contains(t, r.stderr, `"slot-holder"`)

	r = cli(t, "run", "--slots", "2", "--no-wait", "--conflict-exit-code", "9", "--name", t.Name(), "--", "true")
	assert.Equal(t, 9, r.code, r.stderr)
	// Reported while waiting, every second: the holders' query finds a pool connection
	// beside the ones the waiting Acquire pins.
	r = cli(t, "run", "--slots", "2", "--wait", "3s", "--name", t.Name(), "--", "true")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, `gave up on semaphore "`+t.Name()+`" (2 slots) after 3s (--wait)`)
	assert.NotContains(t, r.stderr, "unknown session")

	require.NoError(t, ls[1].Unlock(context.Background()))
	r = cli(t, "run", "--slots", "2", "--no-wait", "--name", t.Name(), "--", "sh", "-c", `echo "$PGADVISORY_KEY"`)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, ls[1].Key().String(), strings.TrimSpace(r.stdout), "the command runs on the free slot")
}

// TestRunSlotsKilledHolderFreesItsSlot: run --slots 1 with a command that keeps fd 3 and
// a background child that keeps it too (and gets no parent-death signal); its pgadvisory
// is SIGKILLed. The kernel kills the command; the background child, told to end only
// once the command is gone, records its end and exits; the waiting run's command records
// its start. Had the slot ended with pgadvisory, the waiter would have started before the
// child was told to end. Only the order is asserted, never a duration.
func TestRunSlotsKilledHolderFreesItsSlot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile, ready, log, bgGo := filepath.Join(dir, "pid"), filepath.Join(dir, "ready"), filepath.Join(dir, "log"),
		filepath.Join(dir, "go")
	first := `echo $$ > "$1"; (i=0; while [ ! -e "$4" ] && [ $i -lt 1200 ]; do sleep 0.1; i=$((i+1)); done; ` +
		`sleep 0.3; echo "bgend $(date +%s%N)" >> "$3") >/dev/null 2>&1 & touch "$2"; exec sleep 120`
	p1 := start(t, "run", "--slots", "1", "--name", t.Name(), "--", "sh", "-c", first, "sh", pidFile, ready, log, bgGo)
	require.Eventually(t, func() bool { return exists(ready) }, 30*time.Second, 10*time.Millisecond)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	cmdPID, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)

	p2 := start(t, "run", "--slots", "1", "--name", t.Name(), "--", "sh", "-c", `echo "start $(date +%s%N)" >> "$1"`, "sh", log)
	p2.stderr.waitFor(t, "full (its slot taken)", 20*time.Second)

	require.NoError(t, p1.cmd.Process.Signal(syscall.SIGKILL))
	r1 := wait(t, p1)
	assert.Equal(t, 128+9, r1.code)
	assert.Eventually(t, func() bool { return syscall.Kill(cmdPID, 0) != nil }, 10*time.Second, 10*time.Millisecond,
		"the command was killed with its pgadvisory (parent-death signal)")
	require.NoError(t, os.WriteFile(bgGo, nil, 0o600))
	r2 := wait(t, p2)
	require.Equal(t, 0, r2.code, r2.stderr)
	out, err := os.ReadFile(log)
	require.NoError(t, err)
	f := strings.Fields(string(out))
	require.Len(t, f, 4, "%q", out)
	assert.Equal(t, []string{"bgend", "start"}, []string{f[0], f[2]},
		"the waiter's command started only after the last process holding fd 3 was gone: %q", out)
	bgEnd, _ := strconv.ParseInt(f[1], 10, 64)
	start2, _ := strconv.ParseInt(f[3], 10, 64)
	assert.Less(t, bgEnd, start2, "%q", out)
}

// TestRunSlotsNamespace: --namespace names the semaphore as the library's WithNamespace:
// a slot held through the library with the namespace is the one run --slots finds taken.
func TestRunSlotsNamespace(t *testing.T) {
	t.Parallel()
	holdSlots(t, "ns1:"+t.Name(), 1)
	r := cli(t, "run", "--slots", "1", "--no-wait", "--namespace", "ns1", "--name", t.Name(), "--", "true")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, `semaphore "ns1:`+t.Name()+`" (1 slot) is full`)
	r = cli(t, "run", "--slots", "1", "--no-wait", "--namespace", "ns2", "--name", t.Name(), "--", "true")
	assert.Equal(t, 0, r.code, r.stderr)
}

func TestRunSlotsUsageErrors(t *testing.T) {
	t.Parallel()
	for args, why := range map[string]string{
		"--slots 0 --name k":  "between 1 and",
		"--slots -1 --name k": "between 1 and",
		fmt.Sprintf("--slots %d --name k", advisory.MaxSemaphoreLimit+1): "between 1 and",
		"--slots 2 --key 12":                            "--slots needs --name",
		"--slots 2 --shared --name k":                   "--slots and --shared exclude each other",
		"--slots 2 --token --name k":                    "--token cannot be used with --slots",
		"--slots 2 --name " + strings.Repeat("x", 4090): "slot names",
	} {
		r := noDB(t, append(append([]string{"run"}, strings.Fields(args)...), "--", "true")...)
		assert.Equal(t, 64, r.code, "%s: %s", args, r.stderr)
		assert.Contains(t, r.stderr, why, args)
	}
}

// TestRunSlotsLossStopsTheCommand: the slot is the lock run supervises. Its session
// terminated, the command is stopped and run exits 76, naming the slot.
func TestRunSlotsLossStopsTheCommand(t *testing.T) {
	t.Parallel()
	m, _ := holdLock(t, t.Name()+"/observer", "")
	ready := filepath.Join(t.TempDir(), "ready")
	p := start(t, "run", "--slots", "1", "--name", t.Name(), "--holder-name", t.Name(), "--grace", "2s",
		"--", "sh", "-c", `touch "$1"; exec sleep 60`, "sh", ready)
	require.Eventually(t, func() bool { return exists(ready) }, 30*time.Second, 10*time.Millisecond)
	h := waitHeldByApp(t, m, t.Name()+"#slot/0", t.Name())
	var ok bool
	require.NoError(t, adminQuery(t, "SELECT pg_terminate_backend($1)", int32(h.PID)).Scan(&ok))
	r := wait(t, p)
	require.Equal(t, 76, r.code, r.stderr)
	assert.Contains(t, r.stderr, `lock "`+t.Name()+`#slot/0" lost while the command ran`)
}
