package faults_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestRunWaitRidesOutAFailover (issue 44 item 7): `pgadvisory run` waiting for a lock
// through a multi-host connection string (target_session_attrs=read-write) exited 69 when
// a failover cut its wait. A real primary with a streaming standby; a Manager holds the
// lock on the primary and run waits for it. The primary is stopped (fast shutdown, as a
// failover manager does); once run says that its wait lost its connection, the standby is
// promoted: run must reconnect within --connect-timeout, take the lock on the new primary
// and run its command there (exit 0).
func TestRunWaitRidesOutAFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the failover test starts two servers")
	}
	serversLane.join(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	primary, standby := primaryWithStandby(t, ctx)
	cli := buildCLI(t)

	both := multiHost(t, primary.DSN(), standby.DSN())
	name := t.Name()
	m, err := advisory.New(ctx, both)
	require.NoError(t, err)
	defer m.Close()
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	dir := t.TempDir()
	started, finish := filepath.Join(dir, "started"), filepath.Join(dir, "finish")
	h := startMerged(t, []string{"DATABASE_URL="}, cli, "run", "--dsn", both, "--name", name,
		"--holder-name", name, "--connect-timeout", "60s", "--",
		"sh", "-c", `touch "$1"; while [ ! -e "$2" ]; do sleep 0.05; done; echo ran`, "sh", started, finish)
	waitForWaiterOf(t, m, name)

	failed := time.Now()
	require.NoError(t, primary.Close()) // fast shutdown: every session is terminated
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the holder was not told within 10s of the primary's shutdown")
	}
	// Promoted once run was told: its wait's connection, and the library's one more try,
	// failed (no host accepts writes), so run itself must reconnect across the promotion.
	h.expectContaining(t, "lost the connection while waiting for lock", 30*time.Second)
	require.NoError(t, standby.Promote(ctx))
	promoted := time.Since(failed)

	require.Eventually(t, func() bool { _, err := os.Stat(started); return err == nil }, 60*time.Second,
		10*time.Millisecond, "run never started its command after the failover")
	ran := time.Since(failed)
	pids := holdersAt(t, standby.DSN(), advisory.KeyOf(name))
	require.Len(t, pids, 1, "run holds the lock on the new primary while its command runs")
	require.NoError(t, os.WriteFile(finish, nil, 0o644))
	h.expectContaining(t, "ran", 30*time.Second)
	select {
	case <-h.exit:
	case <-time.After(30 * time.Second):
		t.Fatal("run did not exit after its command")
	}
	assert.Equal(t, 0, h.cmd.ProcessState.ExitCode(), "run's exit code: its command's")
	t.Logf("primary stopped and standby promoted in %v; run's command started %v after the primary stopped",
		promoted.Round(time.Millisecond), ran.Round(time.Millisecond))
}

// waitForWaiterOf waits until a session with application_name name waits for the lock
// name.
func waitForWaiterOf(t *testing.T, m *advisory.Manager, name string) {
	t.Helper()
	require.Eventually(t, func() bool {
		hs, err := m.Holders(context.Background(), name)
		require.NoError(t, err)
		for _, h := range hs {
			if !h.Granted && h.ApplicationName == name {
				return true
			}
		}
		return false
	}, 30*time.Second, 10*time.Millisecond, "run never waited for %q", name)
}

// TestRunWaitGivesUpWhenTheServerStaysDown: the server stops for good while run waits;
// run retries for --connect-timeout, counted from the loss, then exits 69 and says so.
func TestRunWaitGivesUpWhenTheServerStaysDown(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a server of its own")
	}
	serversLane.join(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server, err := pgtest.StartLocal(ctx, pgtest.Options{})
	pgtest.Need(t, server, err)
	defer server.Close()
	cli := buildCLI(t)
	name := t.Name()
	m, err := advisory.New(ctx, server.DSN())
	require.NoError(t, err)
	defer m.Close()
	h := runWaitingBehind(t, ctx, m, cli, server.DSN(), name, "--connect-timeout", "3s")

	stopped := time.Now()
	require.NoError(t, server.Close())
	h.expectContaining(t, "reconnecting for up to 3s (--connect-timeout)", 30*time.Second)
	h.expectContaining(t, "still failing after 3s of retries, --connect-timeout", 30*time.Second)
	select {
	case <-h.exit:
	case <-time.After(30 * time.Second):
		t.Fatal("run did not exit after --connect-timeout")
	}
	took := time.Since(stopped)
	assert.Equal(t, 69, h.cmd.ProcessState.ExitCode())
	assert.GreaterOrEqual(t, took, 3*time.Second, "retried for --connect-timeout")
	assert.Less(t, took, 20*time.Second)
	t.Logf("run exited 69 %v after the server stopped", took.Round(time.Millisecond))
}

// TestRunLostWaitEndsOnASignalOrItsWait: while run reconnects a lost wait (the server
// stopped for good, --connect-timeout 60s), SIGTERM still ends it at once (143, the
// command not started), and --wait still bounds the whole wait (75).
func TestRunLostWaitEndsOnASignalOrItsWait(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a server of its own")
	}
	serversLane.join(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	server, err := pgtest.StartLocal(ctx, pgtest.Options{})
	pgtest.Need(t, server, err)
	defer server.Close()
	cli := buildCLI(t)
	m, err := advisory.New(ctx, server.DSN())
	require.NoError(t, err)
	defer m.Close()
	signalled := runWaitingBehind(t, ctx, m, cli, server.DSN(), t.Name()+"/signal", "--connect-timeout", "60s")
	bounded := runWaitingBehind(t, ctx, m, cli, server.DSN(), t.Name()+"/wait", "--connect-timeout", "60s",
		"--wait", "5s")

	stopped := time.Now()
	require.NoError(t, server.Close())
	signalled.expectContaining(t, "reconnecting for up to 1m0s (--connect-timeout)", 30*time.Second)
	require.NoError(t, signalled.cmd.Process.Signal(syscall.SIGTERM))
	signalled.expectContaining(t, "interrupted by SIGTERM while waiting for lock", 30*time.Second)
	bounded.expectContaining(t, "gave up on lock", 30*time.Second)
	for _, h := range []*helper{signalled, bounded} {
		select {
		case <-h.exit:
		case <-time.After(30 * time.Second):
			t.Fatal("run did not exit")
		}
	}
	took := time.Since(stopped)
	assert.Equal(t, 143, signalled.cmd.ProcessState.ExitCode())
	assert.Equal(t, 75, bounded.cmd.ProcessState.ExitCode())
	assert.Less(t, took, 30*time.Second, "well before --connect-timeout")
	t.Logf("both ended %v after the server stopped", took.Round(time.Millisecond))
}

// runWaitingBehind takes name's lock on m and starts `pgadvisory run` (cli) on dsn for the
// same name, with flags, running `echo ran`; it returns once run waits in pg_locks.
func runWaitingBehind(t *testing.T, ctx context.Context, m *advisory.Manager, cli, dsn, name string,
	flags ...string) *helper {
	t.Helper()
	_, err := m.Lock(ctx, name)
	require.NoError(t, err)
	argv := append([]string{cli, "run", "--dsn", dsn, "--name", name, "--holder-name", name}, flags...)
	h := startMerged(t, []string{"DATABASE_URL="}, append(argv, "--", "sh", "-c", "echo ran")...)
	waitForWaiterOf(t, m, name)
	return h
}
