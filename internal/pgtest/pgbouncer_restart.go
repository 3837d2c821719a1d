package pgtest

import (
	"bufio"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Stop sends sig to PgBouncer and blocks until the process has exited or ctx ends (the
// process may then still run). Its files and port stay: [PgBouncer.Start] runs it again.
// What PgBouncer 1.18 does on each signal:
//
//   - SIGTERM: immediate shutdown: it closes every client and server connection at once,
//     so backends end and release what their transactions held;
//   - SIGINT: safe shutdown: it waits until every server connection is released, which a
//     client that keeps a transaction open prevents;
//   - SIGKILL: it does nothing; the kernel closes its sockets.
//
// Stop on a PgBouncer that does not run returns nil. Stop, Start and Close must not run
// concurrently.
func (b *PgBouncer) Stop(ctx context.Context, sig syscall.Signal) error {
	if b.cmd == nil || !b.running() {
		return nil
	}
	if err := b.cmd.Process.Signal(sig); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-b.exit:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Start runs a stopped PgBouncer again, with the same configuration on the same port, and
// blocks until a query through it succeeds or ctx ends. On error the process is stopped
// again (SIGTERM). It is an error to Start a PgBouncer that runs.
func (b *PgBouncer) Start(ctx context.Context) error {
	if b.cmd != nil && b.running() {
		return errors.New("pgtest: pgbouncer is running")
	}
	if err := b.run(); err != nil {
		return err
	}
	if err := b.waitReady(ctx); err != nil {
		b.Stop(context.Background(), syscall.SIGTERM)
		return err
	}
	return nil
}

// PID returns the process id of the PgBouncer that runs, or 0 if none runs (it was
// stopped, or it exited: PgBouncer 1.18 exits on an abandoned cancel request, logging
// "bad client state"; see [PgBouncer.Log]).
func (b *PgBouncer) PID() int {
	if b.cmd == nil || !b.running() {
		return 0
	}
	return b.cmd.Process.Pid
}

// Exited returns a channel closed when the PgBouncer process that runs now exits (closed
// already if none runs). A supervisor waits on it, then calls [PgBouncer.Start]; it must
// not run concurrently with Stop, Start or Close.
func (b *PgBouncer) Exited() <-chan struct{} {
	if b.cmd == nil {
		done := make(chan struct{})
		close(done)
		return done
	}
	return b.exit
}

func (b *PgBouncer) running() bool {
	select {
	case <-b.exit:
		return false
	default:
		return true
	}
}

// LogLine is one line of PgBouncer's log file, with the time PgBouncer stamped on it.
type LogLine struct {
	At   time.Time
	Text string // the line after the timestamp: "[pid] LOG C-0x...: db/user@addr:port closing because: ..."
}

// LogLines returns PgBouncer's log file so far, a LogLine a line, across restarts. A line
// whose timestamp does not parse is skipped.
func (b *PgBouncer) LogLines() []LogLine {
	f, err := os.Open(filepath.Join(b.dir, "pgbouncer.log"))
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []LogLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// "2006-01-02 15:04:05.000 UTC [pid] ...": the zone is the third field.
		f := strings.SplitN(sc.Text(), " ", 4)
		if len(f) < 4 {
			continue
		}
		at, err := time.Parse("2006-01-02 15:04:05.000 MST", f[0]+" "+f[1]+" "+f[2])
		if err == nil {
			out = append(out, LogLine{At: at, Text: f[3]})
		}
	}
	return out
}
