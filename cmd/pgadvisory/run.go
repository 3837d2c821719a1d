package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"time"

	"github.com/pgadvisory/advisory"
)

// runner is one `pgadvisory run`.
type runner struct {
	conn      connFlags
	flags     lockFlags
	lock      lockTarget // from flags
	wait      time.Duration
	noWait    bool
	conflict  int // --conflict-exit-code: the exit code when the lock is held (--no-wait, --wait)
	shared    bool
	slots     int                 // --slots: take a slot of a semaphore of this many (see runslots.go)
	sem       *advisory.Semaphore // with --slots, made once connected
	quiet     bool
	grace     time.Duration
	atLeast   time.Duration // --at-least: the hold after CMD (see hold)
	took      time.Time     // when the lock was taken
	signalled bool          // a signal was passed on to CMD: no hold after it
	drainW    time.Duration // --drain-wait
	beat      time.Duration // --heartbeat, if given (beatSet)
	beatSet   bool
	roles     roleList // --work-role
	holder    string
	fence     fenceFlags
	tok       int64 // the fencing token, with --token
	argv      []string
	stderr    io.Writer
	sigs      chan os.Signal
	phase     string      // what run is doing, for the message if a signal interrupts it
	cut       atomic.Bool // the wait lost its connection and run is reconnecting (runrewait.go)
}

func runCommand(args []string, global connFlags, stdout, stderr io.Writer) int {
	r, err := parseRun(args, global, stdout, stderr)
	if err != nil {
		return exitCode(err, stderr)
	}
	sigs, stop := notifySignals()
	defer stop()
	r.sigs = sigs
	return r.run()
}

func parseRun(args []string, global connFlags, stdout, stderr io.Writer) (*runner, error) {
	r := &runner{stderr: stderr, conn: global}
	fs := flag.NewFlagSet("pgadvisory run", flag.ContinueOnError)
	r.flags.register(fs)
	fs.DurationVar(&r.wait, "wait", 0, "give up (exit 75) after waiting this long; 0 waits as long as it takes")
	fs.BoolVar(&r.noWait, "no-wait", false, "exit 75 at once if the lock is held")
	fs.IntVar(&r.conflict, "conflict-exit-code", exitNotAcquired, "the exit code when --no-wait or --wait gives up")
	fs.BoolVar(&r.shared, "shared", false, "shared mode")
	fs.IntVar(&r.slots, "slots", 0, "take one of N slots of a semaphore named --name instead of the lock")
	fs.BoolVar(&r.quiet, "quiet", false, "do not report who holds the lock while waiting, "+
		"nor earlier holders' sessions that ended on their own")
	fs.DurationVar(&r.grace, "grace", 10*time.Second, "time between SIGTERM and SIGKILL if the lock is lost")
	fs.DurationVar(&r.atLeast, "at-least", 0, "keep the lock after the command until this long after it was taken")
	fs.DurationVar(&r.drainW, "drain-wait", time.Second,
		"how long to wait for an earlier holder's sessions to end before terminating them")
	fs.Var(&r.roles, "work-role", "also drain earlier holders' sessions of this role (repeatable)")
	fs.StringVar(&r.holder, "holder-name", "", "application_name other sessions see")
	fs.DurationVar(&r.beat, "heartbeat", 0, "speak on the lock's connection at least this often, waiting too "+
		"(for idle reapers in the path); 0: off (default: 2s behind a proxy, else off)")
	r.fence.register(fs, true)
	r.conn.register(fs, runConnectTimeout)
	if err := parseFlags(fs, args, runHelp, stdout); err != nil {
		return nil, err
	}
	r.argv = fs.Args()
	if err := r.check(fs); err != nil {
		return nil, err
	}
	if r.holder == "" {
		r.holder = defaultHolderName()
	}
	// A command that cannot start is reported before anyone waits for the lock for it.
	if _, err := exec.LookPath(r.argv[0]); err != nil {
		return nil, startFailure(r.argv[0], err)
	}
	return r, nil
}

func (r *runner) check(fs *flag.FlagSet) error {
	tableGiven := false
	fs.Visit(func(f *flag.Flag) {
		tableGiven = tableGiven || f.Name == "fence-table"
		r.beatSet = r.beatSet || f.Name == "heartbeat"
	})
	var err error
	if r.lock, _, err = r.flags.target(fs, true); err != nil {
		return err
	}
	switch {
	case len(r.argv) == 0:
		return usageError(fs.Name(), "no command given after --")
	case r.wait < 0 || r.grace < 0 || r.atLeast < 0:
		return usageError(fs.Name(), "--wait, --grace and --at-least cannot be negative")
	case r.drainW < 0 || r.drainW > maxDrainWait:
		return usageError(fs.Name(), "--drain-wait %v: want 0 (terminate at once) to %v", r.drainW, maxDrainWait)
	case r.beat != 0 && (r.beat < 100*time.Millisecond || r.beat > 24*time.Hour):
		return usageError(fs.Name(), "--heartbeat %v: want 0 (off) or from 100ms to 24h", r.beat)
	case !validConflictCode(r.conflict):
		return usageError(fs.Name(), "--conflict-exit-code %d: want 1 to 125, except pgadvisory's own "+
			"64, 69, 70, 76 and 77", r.conflict)
	case r.noWait && r.wait > 0:
		return usageError(fs.Name(), "--wait and --no-wait exclude each other")
	case r.fence.token && r.shared:
		return usageError(fs.Name(), "--token needs an exclusive lock: %s",
			strings.TrimPrefix(advisory.ErrSharedToken.Error(), "advisory: "))
	case tableGiven && !r.fence.token:
		return usageError(fs.Name(), "--fence-table is used only with --token")
	}
	if err := r.conn.check(fs.Name()); err != nil {
		return err
	}
	if err := r.fence.check(fs.Name()); err != nil {
		return err
	}
	return r.checkSlots(fs)
}

// run connects, takes the lock (and the token), drains the sessions of earlier holders'
// work and runs CMD under the lock. Until CMD starts, the first signal ends everything at
// once: the wait is cancelled on the server, CMD never starts, and run exits 128+N.
func (r *runner) run() int {
	ctx, in := watchInterrupts(r.sigs)
	r.phase = "connecting"
	opts := append(r.fence.options(), advisory.WithDrainWait(r.drainW), advisory.WithWorkRoles(r.roles...))
	if r.beatSet { // else the library's default: off, or on behind a proxy
		opts = append(opts, advisory.WithHeartbeat(r.beat))
	}
	m, err := r.conn.connect(ctx, "run", r.holder, opts...)
	if err != nil {
		if sig := in.end(); sig != nil {
			return r.interrupted(sig)
		}
		return exitCode(err, r.stderr)
	}
	defer m.Close()
	r.phase = fmt.Sprintf("waiting for %s", r.lock.label())
	l, err := r.take(ctx, m)
	r.took = time.Now()
	if err == nil && r.fence.token {
		r.phase = fmt.Sprintf("taking the fencing token of %s", r.lock.label())
		r.tok, err = r.takeToken(ctx, l)
	}
	if err == nil {
		r.phase = fmt.Sprintf("draining earlier holders' sessions of %s", r.lock.label())
		err = r.drain(ctx, l)
	}
	if err == nil && !l.Shared() && r.slots == 0 {
		r.phase = fmt.Sprintf("announcing %s to observers", r.lock.label())
		err = r.announce(ctx, l)
	}
	if sig := in.end(); sig != nil {
		if l != nil {
			r.release(l) // the grant raced the signal: CMD must not run
		}
		return r.interrupted(sig)
	}
	if err != nil {
		if l != nil {
			r.release(l)
		}
		return exitCode(err, r.stderr)
	}
	return r.supervise(l)
}

// announce tells observers (status --watch, Manager.Observe) that this run holds the
// lock: they see it at once rather than at their next re-check. A failure other than the
// lock's end is reported and run goes on: observers then see it at their re-check.
func (r *runner) announce(ctx context.Context, l *advisory.Lock) error {
	err := l.Publish(ctx, "")
	switch {
	case err == nil, ctx.Err() != nil:
		return err
	case errors.Is(err, advisory.ErrLockLost), errors.Is(err, advisory.ErrNotHeld):
		return fail(exitLost, "%s was lost while announcing it: %v; the command was not started", r.lock.label(), err)
	}
	r.say("could not announce %s to observers (they see it at their next re-check): %v", r.lock.label(), err)
	return nil
}

func (r *runner) interrupted(sig os.Signal) int {
	r.say("interrupted by %s while %s; the command was not started", signalName(sig), r.phase)
	return signalExitCode(sig)
}

// say prints a message of run on stderr, masked and escaped (see display).
func (r *runner) say(format string, args ...any) {
	fmt.Fprintln(r.stderr, "pgadvisory: "+display(fmt.Sprintf(format, args...)))
}
