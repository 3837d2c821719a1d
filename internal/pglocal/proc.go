package pglocal

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"syscall"
	"time"
)

// OwnDir arranges for a server program (postgres, pgbouncer: both refuse to run as root)
// to run as the postgres OS user when we are root: it chowns dir to that user and returns
// the credential to run with. It returns nil, nil when we are not root, and an error when
// we are root and there is no postgres user.
func OwnDir(dir string) (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("running as root needs a postgres OS user: %w", err)
	}
	uid, _ := strconv.Atoi(u.Uid)
	gid, _ := strconv.Atoi(u.Gid)
	if err := os.Chown(dir, uid, gid); err != nil {
		return nil, err
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago. Another process may
// take it before the caller binds it.
func FreePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// StartTied starts cmd, which must have a non-nil SysProcAttr, so that it gets sig if this
// process dies without stopping it (a test binary that panics or is killed runs no
// cleanup, nor does a SIGKILLed demo): no server outlives its caller. The parent-death
// signal fires when the thread that forked the child exits, so the fork happens on a
// thread locked for the call, which goes back to the runtime's pool (and lives as long as
// the process) when unlocked.
func StartTied(cmd *exec.Cmd, sig syscall.Signal) error {
	cmd.SysProcAttr.Pdeathsig = sig
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return cmd.Start()
}

// ChildrenOf returns the pids of pid's child processes that have not exited (no
// zombies), read from /proc; none where /proc cannot be read. A PostgreSQL server's
// children are not in its postmaster's process group (each calls setsid): this is how to
// find them.
func ChildrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var kids []int
	for _, e := range entries {
		k, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if ppid, state, ok := procStat(k); ok && ppid == pid && state != 'Z' {
			kids = append(kids, k)
		}
	}
	return kids
}

// procStat returns the parent pid and state of process pid, from /proc/pid/stat.
func procStat(pid int) (ppid int, state byte, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces and parentheses; the last ")" ends it.
	i := bytes.LastIndexByte(b, ')')
	f := bytes.Fields(b[i+1:])
	if i < 0 || len(f) < 2 || len(f[0]) != 1 {
		return 0, 0, false
	}
	ppid, err = strconv.Atoi(string(f[1]))
	return ppid, f[0][0], err == nil
}

// waitGone waits until none of pids runs (gone, or a zombie its new parent has yet to
// reap), for at most 10 s: a SIGKILLed process is gone within moments.
func waitGone(pids []int) {
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range pids {
		for time.Now().Before(deadline) {
			if _, state, ok := procStat(p); !ok || state == 'Z' {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}
