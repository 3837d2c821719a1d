package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/pgadvisory/advisory"
)

// runner is one `pgadvisory run`.
type runner struct {
	conn   connFlags
	key    string
	wait   time.Duration
	noWait bool
	shared bool
	quiet  bool
	grace  time.Duration
	holder string
	argv   []string
	stderr io.Writer
	sigs   chan os.Signal
}

func runCommand(args []string, stderr io.Writer) int {
	r, err := parseRun(args, stderr)
	if err != nil {
		return exitCode(err, stderr)
	}
	r.sigs = make(chan os.Signal, 8)
	signal.Notify(r.sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
	defer signal.Stop(r.sigs)
	return r.run()
}

func parseRun(args []string, stderr io.Writer) (*runner, error) {
	r := &runner{stderr: stderr}
	fs := flag.NewFlagSet("pgadvisory run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&r.key, "key", "", "lock name (required)")
	fs.DurationVar(&r.wait, "wait", 0, "give up (exit 75) after waiting this long; 0 waits as long as it takes")
	fs.BoolVar(&r.noWait, "no-wait", false, "exit 75 at once if the lock is held")
	fs.BoolVar(&r.shared, "shared", false, "shared mode: shared holders run together; an exclusive one runs alone")
	fs.BoolVar(&r.quiet, "quiet", false, "do not report who holds the lock while waiting")
	fs.DurationVar(&r.grace, "grace", 10*time.Second, "if the lock is lost: time between SIGTERM and SIGKILL to CMD's process group")
	fs.StringVar(&r.holder, "holder-name", "", `application_name other sessions see (default "pgadvisory HOST/PID")`)
	r.conn.register(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "Usage: pgadvisory run --key K [--wait DURATION | --no-wait] [--shared] [flags] -- CMD [ARGS...]")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil, &exitError{exitOK, errors.New("")}
		}
		return nil, &exitError{exitUsage, errors.New("")} // flag already printed why
	}
	r.argv = fs.Args()
	switch {
	case r.key == "":
		return nil, fail(exitUsage, "run: --key is required")
	case advisory.ValidateName(r.key) != nil:
		return nil, fail(exitUsage, "run: --key: %v", advisory.ValidateName(r.key))
	case len(r.argv) == 0:
		return nil, fail(exitUsage, "run: no command given after --")
	case r.wait < 0 || r.grace < 0:
		return nil, fail(exitUsage, "run: --wait and --grace cannot be negative")
	case r.noWait && r.wait > 0:
		return nil, fail(exitUsage, "run: --wait and --no-wait exclude each other")
	}
	if r.holder == "" {
		r.holder = defaultHolderName()
	}
	return r, nil
}

func (r *runner) run() int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := r.conn.connect(ctx, r.holder)
	if err != nil {
		return exitCode(err, r.stderr)
	}
	defer m.Close()
	l, err := r.acquire(ctx, m)
	if err != nil {
		return exitCode(err, r.stderr)
	}
	return r.supervise(l)
}

func (r *runner) say(format string, args ...any) {
	fmt.Fprintf(r.stderr, "pgadvisory: "+format+"\n", args...)
}

// acquire takes the lock as the flags say, reporting who holds it while it waits.
func (r *runner) acquire(ctx context.Context, m *advisory.Manager) (*advisory.Lock, error) {
	if r.noWait {
		l, err := r.try(ctx, m)
		if errors.Is(err, advisory.ErrLocked) {
			return nil, fail(exitNotAcquired, "lock %q is %s; not waiting (--no-wait)", r.key, r.holders(ctx, m))
		}
		return l, r.lockFailure(err)
	}
	wctx, stop := ctx, context.CancelFunc(func() {})
	if r.wait > 0 {
		wctx, stop = context.WithTimeout(ctx, r.wait)
	}
	defer stop()
	done := make(chan lockResult, 1)
	go func() {
		l, err := r.lockCall(wctx, m)
		done <- lockResult{l, err}
	}()
	return r.awaitLock(ctx, m, done, stop)
}

func (r *runner) try(ctx context.Context, m *advisory.Manager) (*advisory.Lock, error) {
	if r.shared {
		return m.TryLockShared(ctx, r.key)
	}
	return m.TryLock(ctx, r.key)
}

func (r *runner) lockCall(ctx context.Context, m *advisory.Manager) (*advisory.Lock, error) {
	if r.shared {
		return m.LockShared(ctx, r.key)
	}
	return m.Lock(ctx, r.key)
}

type lockResult struct {
	l   *advisory.Lock
	err error
}

// awaitLock waits for the Lock call in done, reporting the holders every so often, and
// gives up on a signal.
func (r *runner) awaitLock(ctx context.Context, m *advisory.Manager, done <-chan lockResult,
	stop context.CancelFunc) (*advisory.Lock, error) {
	start := time.Now()
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	var last string
	var lastAt time.Time
	for {
		select {
		case res := <-done:
			if errors.Is(res.err, context.DeadlineExceeded) {
				return nil, fail(exitNotAcquired, "gave up on lock %q after %v (--wait): it is %s",
					r.key, r.wait, r.holders(ctx, m))
			}
			if res.err == nil && !r.quiet && !lastAt.IsZero() {
				r.say("acquired lock %q after waiting %s", r.key, age(time.Since(start)))
			}
			return res.l, r.lockFailure(res.err)
		case sig := <-r.sigs:
			stop()
			<-done
			return nil, &exitError{128 + int(sig.(syscall.Signal)), fmt.Errorf("%v while waiting for lock %q; not running the command", sig, r.key)}
		case <-tick.C:
			if r.quiet {
				continue
			}
			// Report when the holders change, and every 10 s while they do not.
			now := r.holders(ctx, m)
			if now != last || time.Since(lastAt) >= 10*time.Second {
				r.say("waiting for lock %q for %s: it is %s", r.key, age(time.Since(start)), now)
				last, lastAt = now, time.Now()
			}
		}
	}
}

func (r *runner) holders(ctx context.Context, m *advisory.Manager) string {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	hs, err := m.Holders(ctx, r.key)
	if err != nil {
		return "held by an unknown session (" + err.Error() + ")"
	}
	return describeHolders(hs, time.Now())
}

func (r *runner) lockFailure(err error) error {
	if err == nil {
		return nil
	}
	return fail(exitUnavailable, "%v", err)
}
