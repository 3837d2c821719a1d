package main_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// envSignalSeed replays TestRunSignalAtARandomMoment's seed.
const envSignalSeed = "PGADVISORY_SIGNAL_SEED"

// signalCase is one run of TestRunSignalAtARandomMoment: run's flags, what CMD does, and
// which signal reaches run when.
type signalCase struct {
	slots                 bool          // run --slots 1: the lock is a semaphore's one slot
	held                  time.Duration // how long another holder keeps the lock after run starts
	atLeast, sleep, delay time.Duration
	trap                  string // CMD's trap of TERM, INT and HUP ("" for none)
	sig                   syscall.Signal
}

func (c signalCase) String() string {
	return fmt.Sprintf("slots %v, held elsewhere %v, --at-least %v, CMD sleeps %v then exits 3, trap %q, %v %v after the start",
		c.slots, c.held, c.atLeast, c.sleep, c.trap, c.sig, c.delay)
}

// TestRunSignalAtARandomMoment sends a signal to a pgadvisory run process (a lock, or one
// slot of a semaphore: --slots 1) at a random moment of its life (connecting, waiting for the lock another holder keeps, CMD running,
// the --at-least hold, after its exit), as a supervisor stopping a job would, with CMD
// trapping the signal or not, and a second run of the same lock waiting behind it.
// Whatever the moment, run must:
//
//   - exit soon after the signal, with a code its help gives for that moment: 128+N
//     before CMD started, CMD's own code after (3, 4 from its trap, or 128+N when the
//     signal passed on to it killed it);
//   - leave CMD's process reaped, and the lock free (pg_locks);
//   - never let the second run's CMD start while its own CMD is still alive.
//
// The seed is logged; PGADVISORY_SIGNAL_SEED replays it.
func TestRunSignalAtARandomMoment(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv(envSignalSeed); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, envSignalSeed)
	}
	t.Logf("seed %d (%s=%d replays it)", seed, envSignalSeed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	pick := func(d ...time.Duration) time.Duration { return d[rng.IntN(len(d))] }
	traps := []string{"", "trap 'exit 4' TERM INT HUP", "trap 'sleep 0.2; exit 4' TERM INT HUP"}
	sigs := []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP}
	moments, heldSeen := map[string]int{}, 0
	for i := 0; i < 24; i++ {
		// An hour's hold ends only by the signal, which then always comes before run's
		// exit: a run that let the hold run on would not exit.
		c := signalCase{slots: rng.IntN(3) == 0, held: pick(0, 0, 300*time.Millisecond), atLeast: pick(0, 400*time.Millisecond, time.Hour),
			sleep: pick(0, 300*time.Millisecond, 800*time.Millisecond), trap: traps[rng.IntN(len(traps))],
			sig: sigs[rng.IntN(len(sigs))]}
		if c.slots {
			c.held = 0 // the other holder is the library's Lock of the name, not a slot
		}
		// run's life: starting, connecting and taking the lock, then CMD, and the hold
		// since the lock was taken: a signal may come at any of them, or just after.
		life := c.held + 120*time.Millisecond + max(c.sleep, c.atLeast)
		if c.atLeast == time.Hour {
			life = c.held + 120*time.Millisecond + c.sleep + 400*time.Millisecond
		}
		c.delay = time.Duration(rng.Int64N(int64(life)))
		moment, held := runWithSignal(t, fmt.Sprintf("%s/%d", t.Name(), i), c)
		moments[moment]++
		if held {
			heldSeen++
		}
	}
	t.Logf("signals that came: %v; run's lock seen in pg_locks while CMD ran: %d times", moments, heldSeen)
	assert.Positive(t, heldSeen, "the check of run's locks by application_name saw none held")
}

// runWithSignal runs case c on the lock name, checks what TestRunSignalAtARandomMoment
// wants of it, and returns when the signal came, as run's exit and stderr tell, and
// whether it saw run's lock held (by its application_name) while CMD ran.
func runWithSignal(t *testing.T, name string, c signalCase) (moment string, heldSeen bool) {
	t.Helper()
	dir := t.TempDir()
	app := "signal-" + strconv.Itoa(rand.IntN(1<<30)) // run's sessions, and no one else's
	lockFlags := []string{"--name", name}
	if c.slots {
		lockFlags = append(lockFlags, "--slots", "1")
	}
	pidFile := filepath.Join(dir, "pid")
	script := c.trap + "\n" + `echo $$ > "$1.tmp" && mv "$1.tmp" "$1"; sleep ` +
		strconv.FormatFloat(c.sleep.Seconds(), 'f', 3, 64) + "; exit 3"
	args := append([]string{"run", "--holder-name", app}, lockFlags...)
	if c.atLeast > 0 {
		args = append(args, "--at-least", c.atLeast.String())
	}
	if c.held > 0 { // run waits for it first
		_, l := holdLock(t, name, "")
		// Its error shows below: the lock must be free at the end.
		release := time.AfterFunc(c.held, func() { l.Unlock(context.Background()) }) //nolint:errcheck
		defer release.Stop()
	}
	p := start(t, append(args, "--", "sh", "-c", script, "sh", pidFile)...)
	signalled := make(chan time.Time, 1)
	timer := time.AfterFunc(c.delay, func() {
		if p.cmd.Process.Signal(c.sig) == nil {
			signalled <- time.Now()
		}
		close(signalled)
	})
	defer timer.Stop()

	// run's exit, watched while waiting for CMD to start (wait would reap it twice).
	exited := make(chan result, 1)
	go func() {
		p.cmd.Wait() //nolint:errcheck // the state says it all
		exited <- resultOf(p)
	}()
	// The second run, once CMD has started: its own CMD fails (9) if the first's is alive.
	var second *proc
	var cmdPID int
	var seen time.Time // when the test found CMD's pid: CMD wrote it within the poll before
	var r result
	var end time.Time
	deadline := time.After(time.Minute)
	readPID := func() int { // 0 until CMD has written it
		b, err := os.ReadFile(pidFile)
		if err != nil {
			return 0
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		require.NoError(t, err, "CMD's pid file")
		return pid
	}
	for done := false; !done; {
		if second == nil {
			cmdPID = readPID()
		}
		if cmdPID != 0 && second == nil {
			seen = time.Now()
			// CMD alive after the count: the lock was held all along (run keeps it while CMD lives).
			if n := advisoryLocksOf(t, app); syscall.Kill(cmdPID, 0) == nil {
				assert.Positive(t, n, "CMD runs, and run's session holds no advisory lock")
				heldSeen = true
			}
			second = start(t, append(append([]string{"run", "--quiet"}, lockFlags...), "--", "sh", "-c",
				`if kill -0 "$1" 2>/dev/null; then echo "overlap: $1 alive" >&2; exit 9; fi`, "sh", strconv.Itoa(cmdPID))...)
		}
		select {
		case r = <-exited:
			end, done = time.Now(), true
		case <-time.After(2 * time.Millisecond):
		case <-deadline:
			p.cmd.Process.Kill()
			t.Fatalf("run did not exit (case %v); stderr:\n%s", c, p.stderr)
		}
	}
	if second == nil { // CMD wrote its pid just before run exited
		cmdPID = readPID()
	}
	at, sent := <-signalled
	defer func() {
		if t.Failed() {
			t.Logf("case: %v; run's exit %d after %v; stderr:\n%s", c, r.code, r.took, r.stderr)
		}
	}()

	moment = "after run's exit"
	switch {
	case !sent:
		assert.Equal(t, 3, r.code, "CMD's exit code, no signal")
	case strings.Contains(r.stderr, "the command was not started"):
		moment = "before CMD started"
		assert.Equal(t, 128+int(c.sig), r.code, "a signal before CMD started")
		assert.Zero(t, cmdPID, "CMD ran")
	case strings.Contains(r.stderr, "ended the hold"):
		moment = "during the hold"
		assert.Equal(t, 3, r.code, "CMD's exit code after a hold a signal ended")
	case !seen.IsZero() && at.After(seen) && at.Before(seen.Add(c.sleep-100*time.Millisecond)):
		// CMD was surely asleep (it wrote its pid at most a poll before seen, then slept).
		moment = "while CMD ran"
		want := []int{128 + int(c.sig)}
		if c.trap != "" {
			want = []int{4}
		}
		assert.Contains(t, want, r.code, "CMD's exit code: the signal passed on to it")
	default:
		moment = "as CMD started or ended"
		want := []int{3, 128 + int(c.sig)} // a trap not yet set when the signal came: killed
		if c.trap != "" {
			want = append(want, 4)
		}
		assert.Contains(t, want, r.code, "CMD's exit code")
	}
	if sent {
		// Liveness: nothing of run's is meant to wait after a signal but CMD's trap
		// (0.2 s); a run waiting out --grace (10 s) or its --at-least would exceed it.
		assert.Less(t, end.Sub(at), 3*time.Second, "run exited %v after the signal (%s)", end.Sub(at), moment)
	}
	if cmdPID != 0 {
		assert.ErrorIs(t, syscall.Kill(cmdPID, 0), syscall.ESRCH, "CMD (pid %d) not reaped after run exited", cmdPID)
	}
	assert.Eventually(t, func() bool { return advisoryLocksOf(t, app) == 0 }, 5*time.Second, 5*time.Millisecond,
		"run's lock still held after it exited (%s)", moment)
	if c.held > 0 {
		assert.Eventually(t, func() bool { return len(holders(t, advisory.KeyOf(name))) == 0 }, 5*time.Second,
			5*time.Millisecond, "the other holder's lock still held after its release")
	}
	if second != nil {
		s := wait(t, second)
		assert.Equal(t, 0, s.code, "the second run: %s", s.stderr)
		if s.code == 9 {
			t.Errorf("the second run's CMD started while the first's was alive (signal %s)", moment)
		}
	}
	return moment, heldSeen
}

// advisoryLocksOf counts the advisory locks (granted or awaited) of the sessions whose
// application_name is app.
func advisoryLocksOf(t testing.TB, app string) int {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn(t))
	require.NoError(t, err)
	defer conn.Close(ctx)
	var n int
	require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM pg_catalog.pg_locks l
		JOIN pg_catalog.pg_stat_activity a ON a.pid = l.pid
		WHERE l.locktype = 'advisory' AND a.application_name = $1`, app).Scan(&n))
	return n
}
