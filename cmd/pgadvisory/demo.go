package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
)

// demo is one `pgadvisory demo`: a throwaway server, three worker processes each running
// `pgadvisory run --key migrations -- pgadvisory demo-migrate`, and a timeline.
type demo struct {
	out     io.Writer
	start   time.Time
	self    string
	dsn     string
	mu      sync.Mutex // serializes timeline lines
	events  chan event
	workers []*demoWorker
}

type event struct {
	worker *demoWorker
	text   string
	at     time.Time
}

type demoWorker struct {
	name string
	cmd  *exec.Cmd
	exit chan struct{}
}

func demoCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pgadvisory demo", flag.ContinueOnError)
	if err := parseFlags(fs, args, demoHelp, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fs.Name(), `unexpected argument "%s"`, fs.Arg(0))
	}
	self, err := os.Executable()
	if err != nil {
		return fail(exitSoftware, "demo: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	d := &demo{out: stdout, start: time.Now(), self: self, events: make(chan event, 256)}
	fmt.Fprintln(stdout, "pgadvisory demo: three workers each run")
	fmt.Fprintln(stdout, "    pgadvisory run --key migrations -- <a 6-step migration>")
	fmt.Fprintln(stdout, "against one PostgreSQL; only the lock holder may migrate.")
	fmt.Fprintln(stdout)
	srv, err := startDemoServer(ctx, func(text string) { d.say("demo", text) })
	if err != nil {
		if ctx.Err() != nil {
			return &exitError{code: exitSignalBase + int(syscall.SIGINT), err: errors.New("demo interrupted while starting PostgreSQL")}
		}
		return fail(exitUnavailable, "demo needs Docker or the PostgreSQL server binaries (apt-get install postgresql): %v", err)
	}
	defer srv.close()
	d.dsn = srv.dsn
	d.say("demo", fmt.Sprintf("PostgreSQL is up (%s)", srv.kind))
	defer d.killAll()
	if err := d.script(ctx); err != nil {
		if ctx.Err() != nil {
			return &exitError{code: exitSignalBase + int(syscall.SIGINT), err: errors.New("demo interrupted; workers stopped, server removed")}
		}
		return fail(exitSoftware, "demo: %v", err)
	}
	return nil
}

func (d *demo) say(who, text string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fmt.Fprintf(d.out, "[%+7.3fs] %-9s %s\n", time.Since(d.start).Seconds(), who, display(text))
}

// script is the scenario. It returns when every worker has exited.
func (d *demo) script(ctx context.Context) error {
	admin, err := pgx.Connect(ctx, d.dsn)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	for i := 1; i <= 3; i++ {
		if err := d.startWorker(fmt.Sprintf("worker-%d", i)); err != nil {
			return err
		}
		time.Sleep(150 * time.Millisecond) // so worker-1 is the first holder
	}
	var killedAt, terminatedAt time.Time
	var takeover, told time.Duration
	holders := 0
	for exited := 0; exited < len(d.workers); {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case ev, ok := <-d.events:
			if !ok {
				return errors.New("event stream closed")
			}
			if ev.text == "" { // the worker exited
				exited++
				d.say(ev.worker.name, exitDescription(ev.worker.cmd.ProcessState))
				continue
			}
			d.say(ev.worker.name, ev.text)
			switch {
			case strings.HasPrefix(ev.text, "migration started"):
				holders++
			case strings.HasPrefix(ev.text, "acquired lock") && !killedAt.IsZero() && takeover == 0:
				takeover = ev.at.Sub(killedAt)
				d.say("demo", fmt.Sprintf("→ %s holds the lock %s after the SIGKILL", ev.worker.name, fmtDur(takeover)))
			case strings.HasPrefix(ev.text, "applied migration 3/6") && holders == 1:
				killedAt = time.Now()
				syscall.Kill(-ev.worker.cmd.Process.Pid, syscall.SIGKILL)
				d.say("demo", fmt.Sprintf("SIGKILL %s's pgadvisory (process %d) mid-migration: the kernel kills its migration too, "+
					"and PostgreSQL frees the lock once both are gone", ev.worker.name, ev.worker.cmd.Process.Pid))
			case strings.HasPrefix(ev.text, "applied migration 2/6") && holders == 2:
				terminatedAt = time.Now()
				pid, err := d.terminateHolder(ctx, admin)
				if err != nil {
					return err
				}
				d.say("demo", fmt.Sprintf("pg_terminate_backend(%d): the server ends %s's session (backend pid %d) under it", pid, ev.worker.name, pid))
			case strings.Contains(ev.text, "lost while the command ran") && !terminatedAt.IsZero():
				told = ev.at.Sub(terminatedAt)
				d.say("demo", fmt.Sprintf("→ %s was told %s after the terminate, stopped its migration, and exits 76", ev.worker.name, fmtDur(told)))
			}
		}
	}
	d.say("demo", fmt.Sprintf("done: takeover after SIGKILL %s; holder told of a terminated session %s", fmtDur(takeover), fmtDur(told)))
	return nil
}

func (d *demo) terminateHolder(ctx context.Context, admin *pgx.Conn) (uint32, error) {
	var pid uint32
	err := admin.QueryRow(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
		AND objsubid = 1 AND classid = $1 AND objid = $2`,
		uint32(uint64(advisory.KeyOf("migrations"))>>32), uint32(advisory.KeyOf("migrations"))).Scan(&pid)
	if err != nil {
		return 0, fmt.Errorf("find the holder: %w", err)
	}
	_, err = admin.Exec(ctx, "SELECT pg_terminate_backend($1)", int32(pid))
	return pid, err
}

func (d *demo) startWorker(name string) error {
	cmd := exec.Command(d.self, "run", "--key", "migrations", "--holder-name", name, "--dsn", d.dsn,
		"--", d.self, "demo-migrate")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		return err
	}
	w.Close()
	wk := &demoWorker{name: name, cmd: cmd, exit: make(chan struct{})}
	d.workers = append(d.workers, wk)
	go func() {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			d.events <- event{wk, strings.TrimPrefix(sc.Text(), "pgadvisory: "), time.Now()}
		}
		cmd.Wait()
		close(wk.exit)
		d.events <- event{worker: wk}
	}()
	return nil
}

// killAll stops every worker still running (on Ctrl-C or an error).
func (d *demo) killAll() {
	for _, w := range d.workers {
		syscall.Kill(-w.cmd.Process.Pid, syscall.SIGKILL)
	}
	for _, w := range d.workers {
		select {
		case <-w.exit:
		case <-time.After(5 * time.Second):
		}
	}
}

func exitDescription(ps *os.ProcessState) string {
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("exited: %v (signal %d)", ws.Signal(), int(ws.Signal()))
	}
	switch ps.ExitCode() {
	case 0:
		return "exited 0: migrated"
	case exitLost:
		return "exited 76: lock lost, migration stopped"
	}
	return fmt.Sprintf("exited %d", ps.ExitCode())
}

func fmtDur(d time.Duration) string {
	return d.Round(10 * time.Microsecond).String()
}

// demoMigrate is the demo's stand-in for `migrate up`: six steps, printed as they go.
// If its parent (the pgadvisory run that holds the lock) dies, the kernel kills it (see
// supervise); checking the parent at every step is a second line for the demo's sake.
func demoMigrate(_ []string, stdout io.Writer) error {
	parent := os.Getppid()
	fmt.Fprintf(stdout, "migration started (process %d)\n", os.Getpid())
	for i := 1; i <= 6; i++ {
		time.Sleep(400 * time.Millisecond)
		if os.Getppid() != parent {
			return &exitError{code: 1, err: errors.New("the lock holder died: stopping")}
		}
		fmt.Fprintf(stdout, "applied migration %d/6\n", i)
	}
	fmt.Fprintln(stdout, "migration finished")
	return nil
}
