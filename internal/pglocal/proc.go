package pglocal

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"runtime"
	"strconv"
	"syscall"
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
