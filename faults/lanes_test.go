package faults_test

import "testing"

// The slow fault tests run in the package's parallel phase, after the serial tests, which
// restart, crash or fill the shared server or load the CPUs with chaos runs. A lane keeps
// apart the tests that must not overlap. The tests that cut a network lab (the partition
// lab, the pooler network) share one lane: they take turns on their labs and their
// tables, and their bounds are timings that a busy machine stretches. The tests with
// servers of their own (failovers, Patroni) take turns in another lane, beside them.
// Each test still runs alone on what it faults.
type lane chan struct{}

var (
	networkLane = make(lane, 1) // netLab, poolNet, their PgBouncers and tables: one test at a time
	serversLane = make(lane, 1) // servers of a test's own: initdb, base backups, failovers
)

// join marks t parallel, then blocks until l has room; t leaves l when it ends. Call it
// before registering the clean-ups that must run inside the lane (a partition's heal).
func (l lane) join(t *testing.T) {
	t.Helper()
	t.Parallel()
	l <- struct{}{}
	t.Cleanup(func() { <-l })
}
