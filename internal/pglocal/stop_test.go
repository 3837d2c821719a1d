package pglocal

import (
	"os"
	"syscall"
	"testing"
	"time"
)

// TestStopLeavesNoProcessOfAHungServer: a server whose postmaster does not answer its
// shutdown signals (stopped with SIGSTOP, as a process starved of CPU for long is, only
// for ever) and one of whose children is stopped too. Stop escalates to SIGKILL, and
// returns only once every process of the server is gone. PostgreSQL's children each lead
// a process group of their own, so a SIGKILL to the postmaster's group, as before, killed
// the postmaster alone and left its children running: the stopped one for ever, the others
// until they noticed the postmaster's death, a standby's WAL receiver streaming meanwhile.
func TestStopLeavesNoProcessOfAHungServer(t *testing.T) {
	ctx := needBinaries(t)
	c := start(t, ctx, Options{})
	was := stopWait
	stopWait = 200 * time.Millisecond // no shutdown can finish: each wait runs out
	t.Cleanup(func() { stopWait = was })
	kids := hang(t, c)
	c.Stop()
	requireGone(t, kids, "Stop")
}

// hang stops (SIGSTOP) c's postmaster and one of its children, and returns the children.
func hang(t *testing.T, c *Cluster) []int {
	t.Helper()
	pid := c.cmd.Process.Pid
	kids := ChildrenOf(pid)
	if len(kids) == 0 {
		t.Fatalf("no child process of the postmaster %d found in /proc", pid)
	}
	for _, p := range []int{pid, kids[0]} {
		if err := syscall.Kill(p, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
	}
	return kids
}

// requireGone fails the test for each of kids still running (a zombie is gone) after
// what, and kills it.
func requireGone(t *testing.T, kids []int, what string) {
	t.Helper()
	for _, k := range kids {
		if _, state, ok := procStat(k); ok && state != 'Z' {
			t.Errorf("process %d of the server (a child of its postmaster) runs on after %s (state %c)", k, what, state)
			syscall.Kill(k, syscall.SIGKILL)
		}
	}
}

// TestWatchdogLeavesNoProcessOfAHungServer: the same hung server (its postmaster and one
// child stopped), its caller gone without stopping it (the watchdog's pipe closed, as a
// test binary that dies does). The watchdog's SIGQUIT goes unanswered; after its polls it
// SIGKILLs the postmaster and each of its children before removing the directory. Before,
// it killed the postmaster's process group, the postmaster alone.
func TestWatchdogLeavesNoProcessOfAHungServer(t *testing.T) {
	ctx := needBinaries(t)
	was := watchdogPolls
	watchdogPolls = 4 // read as the cluster starts its watchdog
	t.Cleanup(func() { watchdogPolls = was })
	c := start(t, ctx, Options{})
	kids := hang(t, c)
	c.dog.stop() // the watchdog's turn: it returns once the watchdog removed the directory
	c.dog = nil
	waitGone(kids)
	requireGone(t, kids, "the watchdog")
	if _, err := os.Stat(c.dir); !os.IsNotExist(err) {
		t.Errorf("the watchdog left %s (%v)", c.dir, err)
	}
}
