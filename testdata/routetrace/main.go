// Command routetrace is TestPlainRoute's traced program (see house_test.go), built with
// -cover -covermode=atomic: on the server of the DSN in its first argument, after a
// warm-up, it clears the coverage counters, makes one plain Lock call, and writes the
// counters to <dir>/lock-<i>; then the same for its Unlock, in <dir>/unlock-<i>; for i
// from 0 to n-1. Its arguments: DSN, dir, n.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime/coverage"
	"strconv"
	"time"

	"github.com/pgadvisory/advisory"
)

func main() {
	if err := run(os.Args[1], os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, "routetrace:", err)
		os.Exit(1)
	}
}

func run(dsn, dir, trials string) error {
	n, err := strconv.Atoi(trials)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer m.Close()
	for i := 0; i < 5; i++ { // warm: the pool's connections, their prepared statements
		if err := lockUnlock(ctx, m, ""); err != nil {
			return err
		}
	}
	for i := 0; i < n; i++ {
		if err := lockUnlock(ctx, m, filepath.Join(dir, "%s-"+strconv.Itoa(i))); err != nil {
			return err
		}
	}
	return nil
}

// lockUnlock makes one Lock and its Unlock, tracing each into a directory named by
// trace (its %s the call) unless trace is "".
func lockUnlock(ctx context.Context, m *advisory.Manager, trace string) error {
	clear(trace)
	l, err := m.Lock(ctx, "routetrace")
	if err != nil {
		return err
	}
	if err := write(trace, "lock"); err != nil {
		return err
	}
	clear(trace)
	if err := l.Unlock(ctx); err != nil {
		return err
	}
	return write(trace, "unlock")
}

// asyncPause lets any work a call leaves to other goroutines run before its counters are
// written, so that it is counted with the call that caused it rather than with the next
// (the loss armer's tick did, until issue 47 removed it: a held lock is watched from its
// grant now, in the call): a slow machine that does not finish it in time only makes a
// trace smaller.
const asyncPause = 50 * time.Millisecond

func clear(trace string) {
	if trace != "" {
		coverage.ClearCounters() // its error is write's too
	}
}

func write(trace, call string) error {
	if trace == "" {
		return nil
	}
	time.Sleep(asyncPause)
	dir := fmt.Sprintf(trace, call)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := coverage.WriteMetaDir(dir); err != nil {
		return err
	}
	return coverage.WriteCountersDir(dir)
}
