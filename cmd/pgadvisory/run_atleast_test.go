package main_test

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestRunAtLeastHoldsAfterTheCommand: with --at-least, run keeps the lock after CMD has
// exited until that long after it took it: a late run elsewhere with --no-wait exits 75
// meanwhile (the cron on another host that fires a little later). run then releases it
// and exits with CMD's code. Without the hold, the late run runs the job again.
func TestRunAtLeastHoldsAfterTheCommand(t *testing.T) {
	t.Parallel()
	const atLeast = 2 * time.Second
	key := advisory.KeyOf(t.Name())
	for _, hold := range []bool{true, false} {
		done := filepath.Join(t.TempDir(), "done")
		args := []string{"run", "--name", t.Name()}
		if hold {
			args = append(args, "--at-least", atLeast.String())
		}
		began := time.Now()
		p := start(t, append(args, "--", "sh", "-c", `touch "$1"; exit 3`, "sh", done)...)
		require.Eventually(t, func() bool { _, err := os.Stat(done); return err == nil }, 20*time.Second, 5*time.Millisecond)
		if !hold { // the lock goes as CMD exits
			require.Eventually(t, func() bool { return len(holders(t, key)) == 0 }, 10*time.Second, 5*time.Millisecond)
		}
		late := cli(t, "run", "--no-wait", "--name", t.Name(), "--", "true")
		r := wait(t, p)
		assert.Equal(t, 3, r.code, "CMD's exit code; stderr: %s", r.stderr)
		assert.Empty(t, holders(t, key), "held after run exited")
		if hold {
			assert.Equal(t, 75, late.code, "a late run took the lock during the hold: %s", late.stderr)
			assert.GreaterOrEqual(t, time.Since(began), atLeast, "run exited before --at-least since it took the lock")
		} else {
			assert.Equal(t, 0, late.code, "without the hold, the late run runs the job again: %s", late.stderr)
		}
	}
}

// TestRunAtLeastEndsOnASignal: a signal during the hold ends it at once: the lock is
// released and run exits with CMD's code. After a signal passed on to CMD, there is no
// hold. A negative --at-least is a usage error.
func TestRunAtLeastEndsOnASignal(t *testing.T) {
	t.Parallel()
	key := advisory.KeyOf(t.Name())

	p := start(t, "run", "--at-least", "1h", "--name", t.Name(), "--", "true")
	p.stderr.waitFor(t, "the command ended; holding", 20*time.Second)
	require.Len(t, holders(t, key), 1, "not held during the hold")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r := wait(t, p)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stderr, "SIGTERM ended the hold")
	assert.Empty(t, holders(t, key))

	ready := filepath.Join(t.TempDir(), "ready")
	p = start(t, "run", "--at-least", "1h", "--name", t.Name(), "--",
		"sh", "-c", `trap 'exit 4' TERM; touch "$1"; while :; do sleep 0.05; done`, "sh", ready)
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 20*time.Second, 5*time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r = wait(t, p)
	assert.Equal(t, 4, r.code, r.stderr)
	assert.Less(t, r.took, time.Minute, "held after a signal CMD got")
	assert.Empty(t, holders(t, key))

	r = cli(t, "run", "--at-least", "-1s", "--name", t.Name(), "--", "true")
	assert.Equal(t, 64, r.code)
	assert.Contains(t, r.stderr, "--at-least cannot be negative")
}

// TestRunAtLeastLossDuringTheHold: the lock lost during the hold (its session terminated)
// ends it: run says so and exits with CMD's code, which ran under the lock.
func TestRunAtLeastLossDuringTheHold(t *testing.T) {
	t.Parallel()
	key := advisory.KeyOf(t.Name())
	p := start(t, "run", "--at-least", "1h", "--name", t.Name(), "--", "sh", "-c", "exit 5")
	p.stderr.waitFor(t, "the command ended; holding", 20*time.Second)
	pids := holders(t, key)
	require.Len(t, pids, 1)
	var ok bool
	require.NoError(t, adminQuery(t, "SELECT pg_terminate_backend($1)", int32(pids[0])).Scan(&ok))
	require.True(t, ok)
	r := wait(t, p)
	assert.Equal(t, 5, r.code, r.stderr)
	assert.Contains(t, r.stderr, "was lost during the hold after the command ended")
	assert.Less(t, r.took, time.Minute)
}
