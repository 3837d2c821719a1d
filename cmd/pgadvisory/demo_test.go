package main_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDemo runs the demo on a server of its own and checks its story against its output:
// the SIGKILLed worker's migration session is drained by the next holder before that
// holder's migration starts, and the table the migrations write shows each step applied
// exactly once, all by the worker that finished: the half-done transactions of the two
// stopped workers never committed.
func TestDemo(t *testing.T) {
	dsn(t) // the demo starts its own server; skip or fail with the rest when none can be had
	t.Parallel()
	p := startEnv(t, []string{"ADVISORY_TEST_DSN="}, "demo")
	r := wait(t, p)
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	for _, want := range []string{"holds the lock", "after the SIGKILL", "was told", "exited 76", "exited 0: migrated"} {
		assert.Contains(t, r.stdout, want)
	}
	assertKilledWorkerDrained(t, r.stdout)
	assertEachStepOnce(t, r.stdout)
	assert.Less(t, r.took.Seconds(), 60.0)
	if testing.Verbose() {
		os.Stdout.WriteString(r.stdout)
	}
}

// assertKilledWorkerDrained checks that worker-2's run reported worker-1's migration
// backend as drained (terminated, or ended on its own during the drain), before
// worker-2's migration started.
func assertKilledWorkerDrained(t *testing.T, out string) {
	t.Helper()
	started := regexp.MustCompile(`(?m)^\[[ +0-9.]+s\] worker-1 +migration started \(process \d+, backend pid (\d+)\)$`).
		FindStringSubmatch(out)
	require.NotNil(t, started, "worker-1's migration never said its backend pid:\n%s", out)
	drained := regexp.MustCompile(`(?m)^\[[ +0-9.]+s\] worker-2 +lock "migrations": an earlier holder's session was still ` +
		`running: backend pid ` + started[1] + ` \("pgadv/[^"]+", role "[^"]+", [a-z ]+\): ` +
		`(terminated, gone|ended on its own) \S+ after the drain began$`).FindStringIndex(out)
	require.NotNil(t, drained, "worker-2 did not drain worker-1's migration backend %s:\n%s", started[1], out)
	ownStart := strings.Index(out, "worker-2  migration started")
	require.Positive(t, ownStart, out)
	assert.Less(t, drained[0], ownStart, "worker-2's migration started before the drain:\n%s", out)
	assert.Contains(t, out, "→ worker-2 drained worker-1's leftover migration session before starting its own (backend pid "+started[1])
}

// assertEachStepOnce checks the table's rows as the demo printed them.
func assertEachStepOnce(t *testing.T, out string) {
	t.Helper()
	m := regexp.MustCompile(`(?m)^\[[ +0-9.]+s\] demo +table pgadvisory_demo after the run: (.*)$`).FindStringSubmatch(out)
	require.NotNil(t, m, "no table line:\n%s", out)
	want := "step 1 by worker-3, step 2 by worker-3, step 3 by worker-3, step 4 by worker-3, step 5 by worker-3, step 6 by worker-3"
	assert.Equal(t, want, m[1], "worker-3 is the only worker whose migration may commit")
}
