package main_test

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRunSignalEndsTheWait: SIGINT and SIGTERM end a wait at once in every mode (the
// default --wait 0 waited for the holder), with 130 and 143; the wait is cancelled on the
// server and the command never runs.
func TestRunSignalEndsTheWait(t *testing.T) {
	t.Parallel()
	modes := map[string][]string{"forever": nil, "wait-1m": {"--wait", "1m"}, "shared": {"--shared"}}
	for mode, flags := range modes {
		for sig, code := range map[syscall.Signal]int{syscall.SIGINT: 130, syscall.SIGTERM: 143} {
			t.Run(mode+"/"+signalName(sig), func(t *testing.T) {
				t.Parallel()
				m, holder := holdLock(t, t.Name(), "")
				marker := filepath.Join(t.TempDir(), "ran")
				args := append([]string{"run", "--name", t.Name(), "--holder-name", t.Name()}, flags...)
				p := start(t, append(args, "--", "touch", marker)...)
				waitForWaiter(t, m, t.Name(), t.Name())

				sent := time.Now()
				require.NoError(t, p.cmd.Process.Signal(sig))
				r := wait(t, p)
				took := time.Since(sent)
				assert.Equal(t, code, r.code, r.stderr)
				assert.Less(t, took, 5*time.Second, "the wait ends at once")
				assert.Contains(t, r.stderr, "interrupted by "+signalName(sig)+` while waiting for lock "`+t.Name()+`"`)
				requireNoWaiters(t, m, t.Name())
				assert.NoFileExists(t, marker, "the command did not run")
				requireHeldBy(t, m, t.Name(), holder.PID()) // the holder was not disturbed
			})
		}
	}
}

// TestRunSignalEndsTheConnect: a server that accepts and never answers held a signal off
// for the 30 s connect timeout, and the signal was then forwarded to the command.
func TestRunSignalEndsTheConnect(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 8)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c // never answered; closed at the end of the test
		}
	}()
	t.Cleanup(func() {
		for len(accepted) > 0 {
			(<-accepted).Close()
		}
	})
	marker := filepath.Join(t.TempDir(), "ran")
	url := "postgres://u:" + secret + "@127.0.0.1:" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port) + "/db?sslmode=disable"
	p := startEnv(t, []string{"DATABASE_URL="}, "run", "--dsn", url, "--name", t.Name(), "--", "touch", marker)
	select {
	case c := <-accepted:
		accepted <- c
	case <-time.After(20 * time.Second):
		t.Fatal("pgadvisory never connected")
	}
	sent := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	r := wait(t, p)
	assert.Equal(t, 143, r.code, r.stderr)
	assert.Less(t, time.Since(sent), 5*time.Second)
	assert.Contains(t, r.stderr, "interrupted by SIGTERM while connecting")
	assertNoSecret(t, r)
	assert.NoFileExists(t, marker)
}

// nohup runs argv with SIGHUP ignored, as nohup(1) does.
func nohup(argv ...string) []string {
	return append([]string{"sh", "-c", `trap "" HUP; exec "$0" "$@"`}, argv...)
}

// TestRunKeepsIgnoredSignalsIgnored: under nohup, SIGHUP stays ignored by pgadvisory while
// it waits, and by the command (handling it reset it to the default, deadly, in CMD).
func TestRunKeepsIgnoredSignalsIgnored(t *testing.T) {
	t.Parallel()
	m, holder := holdLock(t, t.Name(), "")
	dir := t.TempDir()
	ready, proceed, pidFile := filepath.Join(dir, "ready"), filepath.Join(dir, "go"), filepath.Join(dir, "pid")
	script := `echo $$ > "$3"; touch "$1"; while [ ! -e "$2" ]; do sleep 0.02; done; echo finished`
	p := startArgv(t, []string{"DATABASE_URL=" + dsn(t)}, nohup(bin, "run", "--name", t.Name(), "--holder-name", t.Name(),
		"--", "sh", "-c", script, "sh", ready, proceed, pidFile)...)
	waitForWaiter(t, m, t.Name(), t.Name())
	assert.True(t, signalIgnored(t, p.cmd.Process.Pid, syscall.SIGHUP), "pgadvisory left SIGHUP ignored while waiting")
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	require.NoError(t, holder.Unlock(t.Context()))

	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 20*time.Second, 10*time.Millisecond,
		"the command never started: %s", p.stderr)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	cmdPID, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	assert.True(t, signalIgnored(t, cmdPID, syscall.SIGHUP), "the command inherited SIGHUP ignored")
	// A hangup reaches pgadvisory and the command's whole process group: both survive it.
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGHUP))
	require.NoError(t, syscall.Kill(-cmdPID, syscall.SIGHUP))
	require.NoError(t, os.WriteFile(proceed, nil, 0o644))
	r := wait(t, p)
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, "finished")
}

// signalIgnored reads the kernel's mask of ignored signals of a process.
func signalIgnored(t *testing.T, pid int, sig syscall.Signal) bool {
	t.Helper()
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if hex, ok := strings.CutPrefix(line, "SigIgn:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(hex), 16, 64)
			require.NoError(t, err)
			return mask&(1<<(uint(sig)-1)) != 0
		}
	}
	t.Fatalf("no SigIgn in /proc/%d/status", pid)
	return false
}

// TestRunCommandDiesWithPgadvisory: when pgadvisory is SIGKILLed, its connection closes and
// the server frees the lock; the command must not go on running without it.
func TestRunCommandDiesWithPgadvisory(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ready, pidFile := filepath.Join(dir, "ready"), filepath.Join(dir, "pid")
	p := start(t, "run", "--name", t.Name(), "--", "sh", "-c", `echo $$ > "$2"; touch "$1"; while :; do sleep 0.05; done`,
		"sh", ready, pidFile)
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 20*time.Second, 10*time.Millisecond)
	b, err := os.ReadFile(pidFile)
	require.NoError(t, err)
	cmdPID, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	t.Cleanup(func() { syscall.Kill(cmdPID, syscall.SIGKILL) })

	require.NoError(t, p.cmd.Process.Kill())
	assert.Equal(t, 128+9, wait(t, p).code)
	assert.Eventually(t, func() bool { return processGone(cmdPID) }, 10*time.Second, 10*time.Millisecond,
		"the command was killed with pgadvisory")
}

// processGone reports whether pid has exited (a zombie counts: it runs no more).
func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	// pid (comm) state ...: comm may contain spaces and parentheses; the state follows the last ')'.
	s := string(b)
	return strings.HasPrefix(strings.TrimSpace(s[strings.LastIndexByte(s, ')')+1:]), "Z")
}
