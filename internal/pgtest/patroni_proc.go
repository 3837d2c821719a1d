package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// child is a process of the Patroni cluster (etcd, a Patroni, HAProxy) in a process group
// of its own, tied to this process, its output in a log file.
type child struct {
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for
	log  string
}

// startChild runs bin with args in a new process group, as cred (nil: this process's
// user), with its output in logPath.
func startChild(bin, logPath string, cred *syscall.Credential, env []string, args ...string) (*child, error) {
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	defer out.Close()
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	cmd.Dir = filepath.Dir(logPath)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), env...)
	if err := pglocal.StartTied(cmd, syscall.SIGTERM); err != nil {
		return nil, fmt.Errorf("pgtest: %s: %w", filepath.Base(bin), err)
	}
	c := &child{cmd: cmd, exit: make(chan struct{}), log: logPath}
	go func() { cmd.Wait(); close(c.exit) }()
	return c, nil
}

// exited reports whether the process has exited.
func (c *child) exited() bool {
	select {
	case <-c.exit:
		return true
	default:
		return false
	}
}

// output returns the last 4 KiB of the process's log (for failure messages).
func (c *child) output() string {
	data, _ := os.ReadFile(c.log)
	if len(data) > 4096 {
		data = data[len(data)-4096:]
	}
	return string(data)
}

// stop continues the process group (a frozen member would not act on SIGTERM), sends it
// SIGTERM, and SIGKILL after grace; it blocks until the process has exited.
func (c *child) stop(grace time.Duration) {
	if c == nil {
		return
	}
	pg := -c.cmd.Process.Pid
	syscall.Kill(pg, syscall.SIGCONT)
	syscall.Kill(pg, syscall.SIGTERM)
	select {
	case <-c.exit:
	case <-time.After(grace):
	}
	syscall.Kill(pg, syscall.SIGKILL)
	<-c.exit
}

// postmasterPID reads the postmaster's pid from the first line of dataDir/postmaster.pid.
func postmasterPID(dataDir string) (int, error) {
	data, err := os.ReadFile(filepath.Join(dataDir, "postmaster.pid"))
	if err != nil {
		return 0, err
	}
	line, _, _ := strings.Cut(string(data), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("pgtest: bad postmaster.pid in %s: %q", dataDir, line)
	}
	return pid, nil
}

// alive reports whether pid exists (a zombie counts).
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }
