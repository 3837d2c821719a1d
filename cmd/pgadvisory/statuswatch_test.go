package main_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestStatusWatchRepeatsAndFollowsChanges: with stdout not a terminal, --watch prints
// plain blocks (no escape sequences), shows a change of holder, keeps names escaped, and
// SIGINT or SIGTERM ends it with 130 or 143.
func TestStatusWatchRepeatsAndFollowsChanges(t *testing.T) {
	t.Parallel()
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM} {
		name := nasty + t.Name() + sig.String()
		ctx := context.Background()
		a, err := advisory.New(ctx, pgtest.WithPairs(dsn(t), "application_name=first-holder"))
		require.NoError(t, err)
		defer a.Close()
		b, err := advisory.New(ctx, pgtest.WithPairs(dsn(t), "application_name=second-holder"))
		require.NoError(t, err)
		defer b.Close()
		l, err := a.Lock(ctx, name)
		require.NoError(t, err)

		p := start(t, "status", "--watch=50ms", "--name", name)
		p.stdout.waitFor(t, "first-holder", 30*time.Second)
		require.NoError(t, l.Unlock(ctx))
		_, err = b.Lock(ctx, name)
		require.NoError(t, err)
		out := p.stdout.waitFor(t, "second-holder", 30*time.Second)
		require.NoError(t, p.cmd.Process.Signal(sig))
		r := wait(t, p)

		assert.Equal(t, 128+int(sig), r.code, r.stderr)
		assert.GreaterOrEqual(t, strings.Count(out, "pgadvisory status --name"), 2, "repeated blocks:\n%s", out)
		assert.NotContains(t, r.stdout, "\x1b", "no terminal control sequences (and names escaped)")
		assertTerminalSafe(t, r.stdout)
		assert.Contains(t, r.stdout, nastyEscaped+t.Name())
		assert.Contains(t, r.stderr, "stopped by")
	}
}

// TestStatusWatchShowsAnnouncedChangesAtOnce (issue 23, item 3): watching one lock with
// an hour between refreshes, status --watch still prints a block as soon as a run takes
// the lock (run announces itself) and as soon as it releases it: it follows the lock
// with Manager.Observe, which hears run's notifications.
func TestStatusWatchShowsAnnouncedChangesAtOnce(t *testing.T) {
	t.Parallel()
	name := t.Name()
	p := start(t, "status", "--watch=1h", "--name", name)
	p.stdout.waitFor(t, "on change (checked every 1h0m0s)", 30*time.Second)
	p.stdout.waitFor(t, "no advisory lock", 30*time.Second)
	holder := start(t, "run", "--name", name, "--", "sh", "-c", "echo up; exec sleep 60")
	holder.stdout.waitFor(t, "up", 30*time.Second)
	out := p.stdout.waitFor(t, "holding", 20*time.Second)
	require.NoError(t, holder.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 143, wait(t, holder).code)
	before := strings.Count(out, "no advisory lock")
	p.stdout.waitUntil(t, 20*time.Second, "said the lock is free again",
		func(s string) bool { return strings.Count(s, "no advisory lock") > before })
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	r := wait(t, p)
	assert.Equal(t, 130, r.code, r.stderr)
	assert.Equal(t, 3, strings.Count(r.stdout, "on change (checked every 1h0m0s)"), "one block per change:\n%s", r.stdout)
}

func TestStatusWatchFlag(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{"--watch=0s", "--watch=-1s", "--watch=abc", "--watch=5"} {
		r := noDB(t, "status", bad)
		assert.Equal(t, 64, r.code, "%s: %s", bad, r.stderr)
	}
	r := noDB(t, "status", "--watch", "5s")
	assert.Equal(t, 64, r.code)
	assert.Contains(t, r.stderr, "--watch=INTERVAL")
	p := start(t, "status", "--watch")
	p.stdout.waitFor(t, "pgadvisory status on change (checked every 2s)", 30*time.Second)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	assert.Equal(t, 130, wait(t, p).code)
}

// TestStatusWatchPrintsOnlyChangesWhenNotATerminal (issue 37, item 7): into a pipe,
// --watch=50ms printed a full block every 50 ms although nothing changed; the header
// said "on change". It prints one block per change: while one holder holds the lock for
// a second (about 20 looks), one block; after the holder changes, a second.
func TestStatusWatchPrintsOnlyChangesWhenNotATerminal(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, err := advisory.New(ctx, pgtest.WithPairs(dsn(t), "application_name=first-holder"))
	require.NoError(t, err)
	defer a.Close()
	l, err := a.Lock(ctx, t.Name())
	require.NoError(t, err)
	for _, json := range []bool{false, true} {
		args := []string{"status", "--watch=50ms", "--name", t.Name()}
		if json {
			args = append(args, "--json")
		}
		p := start(t, args...)
		p.stdout.waitFor(t, "first-holder", 30*time.Second)
		time.Sleep(time.Second)
		require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
		r := wait(t, p)
		assert.Equal(t, 130, r.code, r.stderr)
		assert.Equal(t, 1, strings.Count(r.stdout, "first-holder"), "json %v: one block while nothing changed:\n%s", json, r.stdout)
		if !json {
			assert.Contains(t, r.stdout, "on change (checked every 50ms)")
		}
	}
	p := start(t, "status", "--watch=50ms", "--name", t.Name())
	p.stdout.waitFor(t, "first-holder", 30*time.Second)
	require.NoError(t, l.Unlock(ctx))
	p.stdout.waitFor(t, "no advisory lock", 30*time.Second)
	time.Sleep(500 * time.Millisecond)
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGINT))
	r := wait(t, p)
	assert.Equal(t, 2, strings.Count(r.stdout, "pgadvisory status --name"), "two blocks, one per state:\n%s", r.stdout)
}

// TestStatusWatchRedrawsOnATerminal: on a terminal each refresh homes the cursor and
// clears the screen before the block.
func TestStatusWatchRedrawsOnATerminal(t *testing.T) {
	t.Parallel()
	master, slave := newPTY(t)
	p := &proc{started: time.Now(), cmd: exec.Command(bin, "status", "--watch=50ms", "--name", t.Name()), stdout: newOutput(),
		stderr: newOutput()}
	p.cmd.Env = append(os.Environ(), "DATABASE_URL="+dsn(t))
	p.cmd.Stdout, p.cmd.Stderr = slave, p.stderr
	require.NoError(t, p.cmd.Start())
	t.Cleanup(func() { p.cmd.Process.Kill() })
	go io.Copy(p.stdout, master)
	const clear = "\x1b[H\x1b[2J"
	require.Eventually(t, func() bool { return strings.Count(p.stdout.String(), clear) >= 2 },
		30*time.Second, 10*time.Millisecond, "no redraw: %q", p.stdout)
	out := p.stdout.String()
	assert.True(t, strings.HasPrefix(out, clear), "%q", out)
	assert.Contains(t, out, fmt.Sprintf(`no advisory lock with key %d (name "%s") is held or awaited`,
		advisory.KeyOf(t.Name()), t.Name()))
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	assert.Equal(t, 143, wait(t, p).code)
}
