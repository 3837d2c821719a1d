package pgtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"time"
)

// debianBinary finds the program name of the Debian package pkg: on PATH, else in
// /usr/bin or /usr/sbin (root's PATH may lack sbin). Otherwise it returns an error
// wrapping [ErrUnavailable] that names the package to install.
func debianBinary(name, pkg string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/bin", "/usr/sbin"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name), nil
		}
	}
	return "", fmt.Errorf("%w: %s is not installed (Debian: apt-get install %s)", ErrUnavailable, name, pkg)
}

// stopGroup stops a program the harness started in a process group of its own: sig
// first (each program's own "shut down now" signal), then SIGKILL of its process group
// if it has not exited within 10 s. exit is closed once cmd has been waited for;
// stopGroup blocks until then. It returns an error naming name if it had to kill.
func stopGroup(cmd *exec.Cmd, exit <-chan struct{}, sig syscall.Signal, name string) error {
	cmd.Process.Signal(sig)
	select {
	case <-exit:
		return nil
	case <-time.After(10 * time.Second):
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-exit
		return fmt.Errorf("pgtest: %s ignored %v for 10s; killed", name, sig)
	}
}
