package main_test

import (
	"bufio"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestRunHandsTheLockSocketToTheCommand: CMD finds the lock's own connection at fd 3,
// named by PGADVISORY_LOCK_FD, inherited (not close-on-exec) and still non-blocking (the
// flag is shared with pgadvisory's copy, whose reads must not block a thread); a normal
// exit still releases the lock. In both modes.
func TestRunHandsTheLockSocketToTheCommand(t *testing.T) {
	t.Parallel()
	m, _ := holdLock(t, t.Name()+"/observer", "")
	for _, mode := range []string{"exclusive", "shared"} {
		t.Run(mode, func(t *testing.T) {
			dir := t.TempDir()
			ready, proceed := filepath.Join(dir, "ready"), filepath.Join(dir, "go")
			script := `echo "fd=$PGADVISORY_LOCK_FD"; readlink /proc/$$/fd/3; grep flags /proc/$$/fdinfo/3; ` +
				`touch "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`
			args := []string{"run", "--name", t.Name(), "--holder-name", t.Name()}
			if mode == "shared" {
				args = append(args, "--shared")
			}
			p := start(t, append(args, "--", "sh", "-c", script, "sh", ready, proceed)...)
			out := p.stdout.waitFor(t, "flags:", 20*time.Second)
			h := waitHeldByApp(t, m, t.Name(), t.Name())
			assert.Equal(t, mode == "shared", h.Shared)

			lines := strings.Split(strings.TrimSpace(out), "\n")
			require.Len(t, lines, 3, out)
			assert.Equal(t, "fd=3", lines[0])
			inode, ok := strings.CutPrefix(lines[1], "socket:[")
			require.True(t, ok, "fd 3 is a socket: %q", lines[1])
			if _, port, err := net.SplitHostPort(h.ClientAddr); err == nil {
				assert.Equal(t, port, localPort(t, strings.TrimSuffix(inode, "]")),
					"fd 3 is the connection that holds the lock (%s)", h.ClientAddr)
			}
			flags, err := strconv.ParseUint(strings.TrimSpace(strings.TrimPrefix(lines[2], "flags:")), 8, 64)
			require.NoError(t, err, lines[2])
			assert.NotZero(t, flags&syscall.O_NONBLOCK, "still non-blocking: %o", flags)
			assert.Zero(t, flags&syscall.O_CLOEXEC, "inherited, not close-on-exec: %o", flags)

			require.NoError(t, os.WriteFile(proceed, nil, 0o644))
			r := wait(t, p)
			require.Equal(t, 0, r.code, r.stderr)
			hs, err := m.Holders(t.Context(), t.Name())
			require.NoError(t, err)
			assert.Empty(t, hs, "released at the command's exit")
		})
	}
}

// localPort finds the local TCP port of the socket with inode in /proc/net/tcp{,6}.
func localPort(t *testing.T, inode string) string {
	t.Helper()
	for _, table := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		f, err := os.Open(table)
		if err != nil {
			continue
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt uid timeout inode ...
			fields := strings.Fields(sc.Text())
			if len(fields) > 9 && fields[9] == inode {
				_, hex, _ := strings.Cut(fields[1], ":")
				port, err := strconv.ParseUint(hex, 16, 16)
				require.NoError(t, err)
				return strconv.FormatUint(port, 10)
			}
		}
	}
	t.Fatalf("socket inode %s not in /proc/net/tcp", inode)
	return ""
}

// TestRunCommandNeverOutlivesTheLock: pgadvisory run is SIGKILLed mid-command while a
// second run waits for the same lock. The second command must start only after the
// first command, and in the "background" variant the background child it started (which
// inherited the socket), has exited: while any of them runs, the first run's backend
// still holds the lock, although pgadvisory itself is gone. Three trials each.
func TestRunCommandNeverOutlivesTheLock(t *testing.T) {
	t.Parallel()
	m, _ := holdLock(t, t.Name()+"/observer", "")
	for _, variant := range []string{"command", "background"} {
		t.Run(variant, func(t *testing.T) {
			for trial := 1; trial <= 3; trial++ {
				took, gap := killedHolderTrial(t, m, []string{"DATABASE_URL=" + dsn(t)}, variant, trial)
				t.Logf("%s, trial %d: the first command's last process gone %v after the SIGKILL of its pgadvisory; "+
					"the second command started %v after that", variant, trial, took, gap)
			}
		})
	}
}

// killedHolderTrial runs one trial, both runs with env (their DATABASE_URL). It returns
// how long the first command's last process outlived its pgadvisory, and the gap
// between its end and the start of the second command.
func killedHolderTrial(t *testing.T, m *advisory.Manager, env []string, variant string, trial int) (took, gap time.Duration) {
	key := t.Name() + "/" + strconv.Itoa(trial)
	dir := t.TempDir()
	ready, pids, started := filepath.Join(dir, "ready"), filepath.Join(dir, "pids"), filepath.Join(dir, "started")
	// The first command: sh itself (exec sleep), or sh with a background sleep that
	// inherits the socket and, unlike CMD, gets no parent-death signal.
	first := `echo $$ > "$1"; touch "$2"; exec sleep 60`
	if variant == "background" {
		// (Not on our pipes, which would keep wait(p1) waiting for the sleep.)
		first = `sleep 60 >/dev/null 2>&1 & echo $$ $! > "$1"; touch "$2"; wait`
	}
	p1 := startEnv(t, env, "run", "--name", key, "--holder-name", key+"/first", "--", "sh", "-c", first, "sh", pids, ready)
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 20*time.Second, 5*time.Millisecond)
	tree := readPIDs(t, pids)
	gone := make([]<-chan time.Time, len(tree))
	for i, pid := range tree {
		t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
		gone[i] = watchExit(t, pid)
	}
	backend := waitHeldByApp(t, m, key, key+"/first").PID

	// The second command's first act is to look at every process of the first (builtins
	// only, so that it looks at once); then it notes when it started. A process killed a
	// moment ago may still show as running in /proc without its descriptors: the kernel
	// closes them (and so the socket, and so the lock) before the process becomes a
	// zombie, and it runs none of its own code in between.
	second := `for p in $2; do ` +
		`if ! read -r _ _ st _ 2>/dev/null < /proc/$p/stat; then echo "$p gone"; ` +
		`elif [ "$st" = Z ]; then echo "$p zombie"; ` +
		`elif [ -h /proc/$p/fd/3 ]; then echo "$p RUNNING($st)"; ` +
		`else echo "$p exiting($st),descriptors-closed"; fi; ` +
		`done > "$1.seen"; date +%s%N > "$1"`
	p2 := startEnv(t, env, "run", "--name", key, "--holder-name", key+"/second", "--", "sh", "-c", second, "sh", started, joinPIDs(tree))
	waitForWaiter(t, m, key, key+"/second")

	killed := time.Now()
	require.NoError(t, p1.cmd.Process.Kill())
	require.Equal(t, 128+9, wait(t, p1).code)
	lastGone := awaitExit(t, gone[0], "the command (parent-death signal)")
	if variant == "background" {
		stillHeld(t, m, key, backend, gone[1], started)
		require.NoError(t, syscall.Kill(tree[1], syscall.SIGKILL))
		lastGone = awaitExit(t, gone[1], "the background child")
	}

	r := wait(t, p2)
	require.Equal(t, 0, r.code, r.stderr)
	return lastGone.Sub(killed), secondStart(t, started, lastGone, trial)
}

// observationSlack is how late this test may see a process's exit (its pidfd wake-up
// needs a CPU, two of which the whole suite shares) relative to the second command's own
// clock reading. The exact check of overlap is the second command's look at /proc.
const observationSlack = 20 * time.Millisecond

// secondStart checks what the second command saw of the first one's processes as it
// started, and returns how long after lastGone (as seen here) it started.
func secondStart(t *testing.T, started string, lastGone time.Time, trial int) time.Duration {
	t.Helper()
	seen, err := os.ReadFile(started + ".seen")
	require.NoError(t, err)
	assert.NotContains(t, string(seen), "RUNNING", "overlap: the second command started while a process of the first ran")
	b, err := os.ReadFile(started)
	require.NoError(t, err)
	ns, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	require.NoError(t, err)
	gap := time.Unix(0, ns).Sub(lastGone)
	if gap <= 0 || strings.Contains(string(seen), "exiting") {
		t.Logf("trial %d: the second command started %v after the exit seen here; as it started it saw: %s",
			trial, gap, strings.Join(strings.Fields(string(seen)), " "))
	}
	assert.Greater(t, gap, -observationSlack, "the second command started long before the first one's last process was gone")
	return gap
}

// stillHeld watches, for a while after pgadvisory and CMD are dead, that the background
// child is alive, the first run's backend still holds key, and the second command has not
// started.
func stillHeld(t *testing.T, m *advisory.Manager, key string, backend uint32, bgGone <-chan time.Time, started string) {
	t.Helper()
	deadline := time.Now().Add(500 * time.Millisecond)
	for time.Now().Before(deadline) {
		select {
		case <-bgGone:
			t.Fatal("the background child died by itself")
		default:
		}
		requireHeldBy(t, m, key, backend)
		require.NoFileExists(t, started)
		time.Sleep(50 * time.Millisecond) // an observation period, not a synchronization
	}
}

func readPIDs(t *testing.T, file string) []int {
	t.Helper()
	b, err := os.ReadFile(file)
	require.NoError(t, err)
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		require.NoError(t, err)
		pids = append(pids, pid)
	}
	require.NotEmpty(t, pids)
	return pids
}

func joinPIDs(pids []int) string {
	s := make([]string, len(pids))
	for i, p := range pids {
		s[i] = strconv.Itoa(p)
	}
	return strings.Join(s, " ")
}

func awaitExit(t *testing.T, gone <-chan time.Time, what string) time.Time {
	t.Helper()
	select {
	case at := <-gone:
		return at
	case <-time.After(20 * time.Second):
		t.Fatalf("%s never exited", what)
		return time.Time{}
	}
}

// sysPidfdOpen is pidfd_open(2) (Linux 5.3), the same number on every architecture.
const sysPidfdOpen = 434

// watchExit reports when pid, which need not be our child, exits: its pidfd becomes
// readable as it turns into a zombie, after the kernel has closed its descriptors.
func watchExit(t *testing.T, pid int) <-chan time.Time {
	t.Helper()
	fd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	require.Zero(t, errno, "pidfd_open(%d)", pid)
	gone := make(chan time.Time, 1)
	go func() {
		defer syscall.Close(int(fd))
		pfd := struct {
			fd            int32
			events, revts int16
		}{fd: int32(fd), events: 0x1} // POLLIN
		timeout := syscall.NsecToTimespec(int64(60 * time.Second))
		for {
			n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&pfd)), 1,
				uintptr(unsafe.Pointer(&timeout)), 0, 0, 0)
			if errno == syscall.EINTR {
				continue
			}
			if errno == 0 && n == 1 {
				gone <- time.Now()
			}
			return
		}
	}()
	return gone
}
