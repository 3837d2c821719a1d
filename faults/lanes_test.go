package faults_test

import "testing"

// The slow fault tests run in the package's parallel phase, after the serial tests, which
// restart, crash or fill the shared server or load the CPUs with chaos runs. A lane keeps
// apart the tests that must not overlap: those that partition the same network lab take
// turns on it, and the tests with servers of their own (failovers, Patroni) run a few at
// a time, while the other lanes go on. Each test still runs alone on what it faults.
type lane chan struct{}

var (
	partitionLane = make(lane, 1) // netLab and its work-markers table: one test at a time
	poolerLane    = make(lane, 1) // poolNet and its PgBouncers: one test at a time
	serversLane   = make(lane, 3) // servers of a test's own: initdb, base backups, failovers
)

// join marks t parallel, then blocks until l has room; t leaves l when it ends. Call it
// before registering the clean-ups that must run inside the lane (a partition's heal).
func (l lane) join(t *testing.T) {
	t.Helper()
	t.Parallel()
	l <- struct{}{}
	t.Cleanup(func() { <-l })
}
