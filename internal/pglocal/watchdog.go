package pglocal

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// watchdogScript runs in a shell of its own that outlives the caller. It waits for EOF on
// its stdin, a pipe whose only writer is the caller: EOF comes when the caller closes it
// (Close) or dies in any way (exit without cleanup, panic, SIGKILL). It then stops the
// postmaster if one still runs in $1/data and removes $1.
//
// The postmaster is recognised by its working directory (postgres chdirs to its data
// directory), never by the pid in postmaster.pid alone, which may name another process by
// now. The parent-death signal (StartTied) has usually stopped it already; the loop also
// ends for a zombie, whose cwd no longer reads, since PID 1 may not reap it at once. A
// postmaster still there after $2 polls (50 ms apart) is SIGKILLed with each of its
// children: they are not in its process group (each PostgreSQL child calls setsid), and
// would otherwise run on into the directory being removed (see Cluster.stopServer).
const watchdogScript = `trap '' INT TERM HUP QUIT
while read -r _; do :; done
data="$1/data"
pid=$(head -n 1 "$data/postmaster.pid" 2>/dev/null)
alive() { [ -n "$pid" ] && [ "$(readlink "/proc/$pid/cwd" 2>/dev/null)" = "$data" ]; }
if alive; then kill -QUIT "$pid" 2>/dev/null; fi
n=0
while alive; do
  n=$((n+1))
  if [ "$n" -eq "$2" ]; then
    for s in /proc/[0-9]*/stat; do
      read -r l 2>/dev/null <"$s" || continue
      r=${l##*) }; r=${r#? }
      if [ "${r%% *}" = "$pid" ]; then p=${s#/proc/}; kill -KILL "${p%/stat}" 2>/dev/null; fi
    done
    kill -KILL "$pid" 2>/dev/null
  fi
  sleep 0.05
done
rm -rf -- "$1"
`

// watchdogPolls is how many times the watchdog finds the postmaster alive after its
// SIGQUIT before it SIGKILLs it and its children: 10 s.
var watchdogPolls = 200

// watchdog removes a cluster's directory once its caller is gone.
type watchdog struct {
	pipe *os.File // the write end; closing it (or dying) starts the clean-up
	cmd  *exec.Cmd
}

// startWatchdog starts the watchdog of dir. It runs in its own process group, so that a
// Ctrl-C meant for the tests does not kill it before it has cleaned up, and as the caller
// (root, when the server runs as postgres: it can remove the server's files).
func startWatchdog(dir string) (*watchdog, error) {
	r, w, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	cmd := exec.Command("/bin/sh", "-c", watchdogScript, "pglocal-watchdog", dir, strconv.Itoa(watchdogPolls))
	cmd.Stdin = r
	cmd.Dir = filepath.Dir(dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		w.Close()
		return nil, err
	}
	return &watchdog{pipe: w, cmd: cmd}, nil
}

// stop lets the watchdog finish (the server must be stopped by then) and waits for it,
// at most 15 s.
func (d *watchdog) stop() {
	if d == nil {
		return
	}
	d.pipe.Close()
	done := make(chan struct{})
	go func() { d.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		d.cmd.Process.Kill()
		<-done
	}
}
