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
)

// demo is one `pgadvisory demo`: a throwaway server, three worker processes each running
// `pgadvisory run --name migrations -- pgadvisory demo-migrate`, and a timeline.
type demo struct {
	out     io.Writer
	start   time.Time
	self    string
	dsn     string
	admin   *pgx.Conn  // the demo's own session: it kills, terminates and looks
	mu      sync.Mutex // serializes timeline lines
	events  chan event
	workers []*demoWorker
	seen    demoSeen
}

// demoSeen is what the timeline has seen so far.
type demoSeen struct {
	holders                int               // migrations started
	backends               map[uint32]string // migration backend pid → worker
	killed                 string            // the worker SIGKILLed
	killedAt, terminatedAt time.Time
	takeover, told         time.Duration
	drained                time.Duration // how long the killed holder's leftover session took to drain
}

type event struct {
	worker *demoWorker
	text   string
	at     time.Time
}

type demoWorker struct {
	name    string
	cmd     *exec.Cmd
	exit    chan struct{}
	backend uint32 // its migration's backend pid, once it said
}

// demoDrainWait is the workers' --drain-wait: shorter than the 1 s default, and than the
// time the killed holder's backend runs on before it notices that its client is gone (see
// demoStepTime), so that the drain terminates it, the same way every time.
const demoDrainWait = 300 * time.Millisecond

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
	d := &demo{out: stdout, start: time.Now(), self: self, events: make(chan event, 256),
		seen: demoSeen{backends: map[uint32]string{}}}
	fmt.Fprintln(stdout, "pgadvisory demo: three workers each run")
	fmt.Fprintf(stdout, "    pgadvisory run --name migrations --drain-wait %v -- <a %d-step migration in one transaction>\n",
		demoDrainWait, demoSteps)
	fmt.Fprintln(stdout, "against one PostgreSQL; only the lock holder may migrate, and a new holder first")
	fmt.Fprintln(stdout, "drains what is left of an earlier holder's migration on the server.")
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

// script is the scenario. It returns when every worker has exited and the demo table
// has been checked.
func (d *demo) script(ctx context.Context) error {
	cfg, err := pgx.ParseConfig(d.dsn)
	if err != nil {
		return err
	}
	cfg.RuntimeParams["application_name"] = "pgadvisory demo"
	admin, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return err
	}
	defer admin.Close(context.Background())
	d.admin = admin
	if _, err := admin.Exec(ctx, demoCreateTable); err != nil {
		return fmt.Errorf("create %s: %w", demoTable, err)
	}
	if err := d.startWorkers(ctx); err != nil {
		return err
	}
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
			if err := d.react(ctx, ev); err != nil {
				return err
			}
		}
	}
	return d.conclude(ctx)
}

func (d *demo) startWorker(name string) error {
	cmd := exec.Command(d.self, "run", "--name", "migrations", "--drain-wait", demoDrainWait.String(),
		"--holder-name", name, "--", d.self, "demo-migrate", name)
	cmd.Env = append(os.Environ(), "DATABASE_URL="+d.dsn) // for run, and for the migration
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
