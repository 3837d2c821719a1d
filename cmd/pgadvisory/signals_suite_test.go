package main_test

import (
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Environment of a nested run of this test binary (TestSuiteUnderIgnoredSignals): the
// pgadvisory binary to use instead of building one.
const envBin = "PGADVISORY_TEST_BIN"

// untrappable are the signals the tests send to pgadvisory and expect it to forward or
// act on. A shell may start the test binary with some of them ignored: nohup(1) and
// `trap "" HUP` ignore SIGHUP, a background job of a script (`go test ./... &`) gets
// SIGINT and SIGQUIT ignored. An ignored signal stays ignored across exec, and pgadvisory
// keeps an inherited-ignored signal ignored by design (TestRunKeepsIgnoredSignalsIgnored
// starts it that way on purpose), so a test would wait for a signal that never arrives.
var untrappable = []os.Signal{syscall.SIGHUP, syscall.SIGINT, syscall.SIGTERM, syscall.SIGQUIT}

// defaultSignalsForChildren makes the processes the tests start begin with the default
// action for each of untrappable that this process was started with ignored, as they do
// when the suite is started from a terminal: a signal the Go runtime handles is reset to
// its default in a child, an ignored one is not. The handler installed here only
// swallows the signal, so this process goes on ignoring it in effect.
func defaultSignalsForChildren() {
	var ignored []os.Signal
	for _, s := range untrappable {
		if signal.Ignored(s) {
			ignored = append(ignored, s)
		}
	}
	if len(ignored) > 0 {
		signal.Notify(make(chan os.Signal, 1), ignored...)
	}
}

// TestSuiteUnderIgnoredSignals runs the tests that signal pgadvisory again, in a nested
// run of this test binary started the way nohup and a script's background job start it
// (SIGHUP, SIGINT and SIGQUIT ignored), against the same server and binary: they must
// pass however the suite is started.
func TestSuiteUnderIgnoredSignals(t *testing.T) {
	if os.Getenv(envBin) != "" {
		t.Skip("already a nested run")
	}
	t.Parallel()
	dsn := dsn(t)
	run := "^(TestRunForwardsSignals|TestRunSignalEndsTheWait|TestRunSignalEndsTheConnect|TestRunKeepsIgnoredSignalsIgnored)$"
	cmd := exec.Command("sh", "-c", `trap '' HUP INT QUIT; exec "$0" "$@"`, os.Args[0],
		"-test.run", run, "-test.count", "1", "-test.timeout", "3m", "-test.v")
	cmd.Env = append(os.Environ(), envBin+"="+bin, "ADVISORY_TEST_DSN="+dsn)
	start := time.Now()
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "the nested run under ignored signals:\n%s", out)
	require.NotContains(t, string(out), "--- SKIP: TestRunForwardsSignals")
	require.Contains(t, string(out), "--- PASS: TestRunForwardsSignals")
	t.Logf("nested run passed in %v (%d lines)", time.Since(start).Round(time.Millisecond), strings.Count(string(out), "\n"))
}
