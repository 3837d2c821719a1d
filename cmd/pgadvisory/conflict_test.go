package main_test

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunConflictExitCode (issue 23, item 8): --conflict-exit-code N is flock's -E: the
// exit code when --no-wait finds the lock held or --wait elapses, instead of 75; a free
// lock runs CMD and passes its code on as before.
func TestRunConflictExitCode(t *testing.T) {
	t.Parallel()
	r := cli(t, "run", "--no-wait", "--conflict-exit-code", "3", "--name", t.Name(), "--", "sh", "-c", "exit 4")
	require.Equal(t, 4, r.code, "a free lock: CMD's own code: %s", r.stderr)

	holdLock(t, t.Name(), "application_name=conflict-holder")
	r = cli(t, "run", "--no-wait", "--conflict-exit-code", "3", "--name", t.Name(), "--", "true")
	assert.Equal(t, 3, r.code, r.stderr)
	assert.Contains(t, r.stderr, "not waiting (--no-wait)")
	r = cli(t, "run", "--wait", "300ms", "--conflict-exit-code", "9", "--name", t.Name(), "--", "true")
	assert.Equal(t, 9, r.code, r.stderr)
	assert.Contains(t, r.stderr, "gave up on lock")
	r = cli(t, "run", "--quiet", "--wait", "1ms", "--conflict-exit-code", "75", "--name", t.Name(), "--", "true")
	assert.Equal(t, 75, r.code, r.stderr)
}

// TestRunConflictExitCodeUsage: 1 to 125, and none of pgadvisory's own codes.
func TestRunConflictExitCodeUsage(t *testing.T) {
	t.Parallel()
	for _, code := range []string{"0", "-1", "126", "127", "130", "255", "256", "64", "69", "70", "76", "77"} {
		r := noDB(t, "run", "--conflict-exit-code", code, "--name", "k", "--", "true")
		assert.Equal(t, 64, r.code, "%s: %s", code, r.stderr)
		n, _ := strconv.Atoi(code)
		assert.Contains(t, r.stderr, "run: --conflict-exit-code "+strconv.Itoa(n)+": want 1 to 125, except", code)
	}
	r := noDB(t, "run", "--conflict-exit-code", "x", "--name", "k", "--", "true")
	assert.Equal(t, 64, r.code, r.stderr)
	assert.Contains(t, r.stderr, "--conflict-exit-code x")
}
