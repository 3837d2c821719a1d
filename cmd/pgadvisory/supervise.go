package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"github.com/pgadvisory/advisory"
)

// supervise runs CMD while the lock is held and returns the exit code of run.
func (r *runner) supervise(l *advisory.Lock) int {
	cmd := exec.Command(r.argv[0], r.argv[1:]...)
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// CMD gets a process group of its own, so a loss stops everything it started. On a
	// terminal that group becomes the foreground one, so CMD can still read the terminal
	// and Ctrl-C reaches it directly.
	// If pgadvisory dies (SIGKILL, OOM), the kernel kills CMD too (PR_SET_PDEATHSIG), and
	// the lock lives on in CMD's copy of the connection (see lockFD) until CMD is gone.
	// The signal is tied to the thread that forks, so this goroutine keeps its thread
	// until CMD has exited.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if isTerminal(os.Stdin) {
		cmd.SysProcAttr.Foreground, cmd.SysProcAttr.Ctty = true, 0
	}
	sock, err := passLock(cmd, l)
	if err != nil {
		return r.notStarted(l, err)
	}
	cmd.Env = r.commandEnv(l, cmd.Env)
	err = cmd.Start()
	sock.Close() // CMD has its own copy now (or none, if it did not start)
	if err != nil {
		r.release(l)
		return exitCode(startFailure(r.argv[0], err), r.stderr)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	pgid := cmd.Process.Pid
	for {
		select {
		case <-exited:
			return r.finish(l, cmd.ProcessState)
		case sig := <-r.sigs:
			r.signalled = true
			syscall.Kill(-pgid, sig.(syscall.Signal))
		case <-l.Done():
			r.say(`%s lost while the command ran: %v; stopping the command (SIGTERM, SIGKILL after %v)`,
				r.lock.label(), l.Err(), r.grace)
			syscall.Kill(-pgid, syscall.SIGTERM)
			select {
			case <-exited:
			case <-time.After(r.grace):
				r.say("command still running after %v: SIGKILL", r.grace)
			}
			syscall.Kill(-pgid, syscall.SIGKILL) // whatever is left of its process group
			<-exited
			return exitLost
		}
	}
}

// finish keeps the lock for --at-least (see hold), releases it after CMD ended and picks
// the exit code: CMD's own, unless the lock turned out to have been lost before CMD ended.
func (r *runner) finish(l *advisory.Lock, ps *os.ProcessState) int {
	if l.Err() == nil && !r.hold(l) {
		r.say(`%s was lost during the hold after the command ended (--at-least %v): %v; a late run elsewhere `+
			"may find it free", r.lock.label(), r.atLeast, l.Err())
		r.release(l)
		return exitStatus(ps)
	}
	err := r.release(l)
	if errors.Is(err, advisory.ErrLockLost) {
		r.say(`the command ended, but %s was lost before it could be released: %v; `+
			"the command may have run without the lock at the end", r.lock.label(), err)
		return exitLost
	}
	if err != nil {
		r.say(`releasing %s: %v (the server frees it as the session ends)`, r.lock.label(), err)
	}
	return exitStatus(ps)
}

// hold keeps the lock, CMD having ended, until --at-least has passed since it was taken,
// so that a run elsewhere that starts a little later (a cron on another host, --no-wait)
// finds it held and skips. A signal ends the hold at once (said on stderr); after a
// signal passed on to CMD there is none. It reports false if the lock was lost meanwhile.
func (r *runner) hold(l *advisory.Lock) bool {
	d := time.Until(r.took.Add(r.atLeast))
	if d <= 0 || r.signalled {
		return true
	}
	if !r.quiet {
		r.say("the command ended; holding %s %v more (--at-least %v)", r.lock.label(), d.Round(time.Millisecond), r.atLeast)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case sig := <-r.sigs:
		r.say("%s ended the hold of %s (--at-least %v) %v early; releasing it now", signalName(sig),
			r.lock.label(), r.atLeast, time.Until(r.took.Add(r.atLeast)).Round(time.Millisecond))
	case <-l.Done():
		return false
	}
	return true
}

func (r *runner) release(l *advisory.Lock) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return l.Unlock(ctx)
}

// exitStatus is CMD's exit code, or 128+N if a signal N killed it (as shells report it).
func exitStatus(ps *os.ProcessState) int {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

func startFailure(name string, err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return fail(exitNotFound, `command not found: "%s"`, name)
	case errors.Is(err, os.ErrPermission):
		return fail(exitCannotExec, `cannot execute "%s": %v`, name, err)
	}
	return fail(exitSoftware, `start "%s": %v`, name, err)
}

func isTerminal(f *os.File) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, f.Fd(), syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}
