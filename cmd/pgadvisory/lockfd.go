package main

import (
	"errors"
	"os"
	"os/exec"
	"strconv"

	"github.com/pgadvisory/advisory"
)

// CMD inherits the lock's connection, as flock(1) hands its command the locked file: the
// server keeps a session, and so its lock, until every process holding the socket has
// exited. If pgadvisory is killed, its own copy closes at once, but the lock stays held
// until CMD (killed by the parent-death signal) and whatever it started with the
// descriptor are gone too; nobody else can take the lock while any of them still runs.
// On a normal exit of CMD, run releases the lock itself, as before.
const (
	// lockFD is the descriptor number of the socket in CMD: the first after stdin,
	// stdout and stderr (ExtraFiles[0]).
	lockFD = 3
	// lockFDEnv names lockFD in CMD's environment, for a command that wants to leave it
	// alone (and not reuse the number) or close it on purpose (a daemon it starts).
	lockFDEnv = "PGADVISORY_LOCK_FD"
)

// passLock makes cmd inherit the socket of l's connection as descriptor lockFD and sets
// lockFDEnv. The caller closes the returned file once cmd has started (or failed to): the
// connection itself stays pgadvisory's. It fails if the lock has ended.
func passLock(cmd *exec.Cmd, l *advisory.Lock) (*os.File, error) {
	sock, err := l.File()
	if err != nil {
		return nil, err
	}
	cmd.ExtraFiles = []*os.File{sock}
	cmd.Env = append(cmd.Environ(), lockFDEnv+"="+strconv.Itoa(lockFD))
	return sock, nil
}

// notStarted is the exit code of run when the lock cannot be handed to CMD: it ended
// before CMD started (76), or its socket could not be duplicated (70). CMD does not run
// without that protection.
func (r *runner) notStarted(l *advisory.Lock, err error) int {
	if errors.Is(err, advisory.ErrLockLost) {
		r.say(`%s was lost before the command started: %v; the command was not started`, r.lock.label(), err)
		return exitLost
	}
	r.release(l)
	return exitCode(fail(exitSoftware, `cannot hand %s to the command: %v; the command was not started`, r.lock.label(), err), r.stderr)
}
