package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
)

// Exit codes of break besides the common ones; see breakHelp.
const (
	exitNothingHeld = 3  // no session holds the lock
	exitDeclined    = 4  // the operator answered no
	exitNoConfirm   = 5  // no terminal to ask on, and no --yes
	exitStillHeld   = 75 // EX_TEMPFAIL: a terminated holder still held the lock after --wait
)

// breakHelp is the help of break, with its exit codes.
const breakHelp = `Usage: pgadvisory break (--name NAME | --key KEY) [--yes] [--wait DURATION] [--dsn DSN]

Breaks a stuck lock: shows who holds it (and who waits for it) as status does, asks for
confirmation, terminates every holder's backend with pg_terminate_backend, waits until
the lock is released and says whether it is free or which session took it next (a waiter,
which break never terminates). A shared lock may have several holders: all are shown and
all are terminated after one confirmation. A session that lets go of the lock between the
display and the termination is left alone. Names and other text from the server are
printed escaped.

Behind a transaction pooler (PgBouncer pool_mode=transaction, Supabase, Neon, RDS Proxy)
break works as it does on PostgreSQL itself: the holders it shows and terminates are
server backends, whichever client reached them through the pooler (a lock held as a
transaction there is freed as its backend goes). A statement pooler is refused (69).

The answer is read from standard input, which must be a terminal ("y" or "yes" goes on);
without a terminal break refuses unless --yes is given.

Terminating another session takes a privilege: a superuser may terminate any backend; a
role may terminate a backend of a role whose privileges it has, or any non-superuser
backend if it is a member of pg_signal_backend (GRANT pg_signal_backend TO ROLE). Only a
superuser may terminate a superuser's backend. break checks this before it asks, and says
which role is missing.

Flags (exactly one of --name and --key):
` + lockFlagsHelp + `  --yes               terminate without asking
  --wait DURATION     how long to wait for the lock to be released after the termination
                      (default 10s)
  --dsn DSN           connection string (default $DATABASE_URL, else the PG* variables)
` + connectTimeoutHead + "0" + connectTimeoutTail + `
` + connectionHelp + `
Exit codes:
  0        the holders were terminated; the lock is free, or a waiter took it
  3        nothing to break: no session holds the lock
  4        not confirmed (an answer other than y or yes, or end of input)
  5        no confirmation possible: standard input is not a terminal and no --yes
  64       usage error
  69       server unavailable, a server error, or a statement-pooling proxy
  75       a terminated holder still held the lock after --wait
  77       permission denied: the role may not terminate a holder (nothing was terminated
           if break found that out before asking)
  130, 143 interrupted by SIGINT or SIGTERM (128+N for signal N)
`

type breakFlags struct {
	lock lockFlags
	yes  bool
	wait time.Duration
}

func breakCommand(args []string, global connFlags, stdin *os.File, stdout, stderr io.Writer) error {
	var f breakFlags
	conn := global
	fs := flag.NewFlagSet("pgadvisory break", flag.ContinueOnError)
	f.lock.register(fs)
	fs.BoolVar(&f.yes, "yes", false, "do not ask for confirmation")
	fs.DurationVar(&f.wait, "wait", 10*time.Second, "how long to wait for the lock to be released")
	conn.register(fs, 0)
	if err := parseFlags(fs, args, breakHelp, stdout); err != nil {
		return err
	}
	target, err := f.target(fs)
	if err != nil {
		return err
	}
	if err := conn.check(fs.Name()); err != nil {
		return err
	}
	sigs, stop := notifySignals()
	defer stop()
	ctx, in := watchInterrupts(sigs)
	defer in.end()
	m, err := conn.connect(ctx, "break", "pgadvisory break")
	if err != nil {
		return interrupted(in, "break", err)
	}
	defer m.Close()
	pc, err := conn.connectPlain(ctx, "pgadvisory break")
	if err != nil {
		return interrupted(in, "break", err)
	}
	defer pc.Close(context.Background())
	b := &breaker{m: m, conn: pc, target: target, wait: f.wait, stdout: stdout, stderr: stderr}
	return interrupted(in, "break", b.run(ctx, f.yes, stdin))
}

// target checks the flags and says which lock they name.
func (f *breakFlags) target(fs *flag.FlagSet) (lockTarget, error) {
	if fs.NArg() > 0 {
		return lockTarget{}, usageError(fs.Name(), `unexpected argument "%s"`, fs.Arg(0))
	}
	if f.wait <= 0 {
		return lockTarget{}, usageError(fs.Name(), "--wait must be positive, e.g. 10s")
	}
	t, _, err := f.lock.target(fs, true)
	return t, err
}

// interrupted turns err into 128+N when signal N ended the context of command cmd.
func interrupted(in *interrupter, cmd string, err error) error {
	if sig := in.end(); sig != nil {
		return fail(signalExitCode(sig), "%s: interrupted by %s", cmd, signalName(sig))
	}
	return err
}

// breaker does one break: show, check, confirm, terminate, wait.
type breaker struct {
	m              *advisory.Manager
	conn           *pgx.Conn // for the statements the library does not run
	target         lockTarget
	wait           time.Duration
	stdout, stderr io.Writer
}

func (b *breaker) run(ctx context.Context, yes bool, stdin *os.File) error {
	hs, err := b.m.HoldersKey(ctx, b.target.key)
	switch {
	case errors.Is(err, advisory.ErrPooler):
		return poolerError("break", "the address pgadvisory connected to", err)
	case err != nil:
		return fail(exitUnavailable, "break: %v", err)
	}
	holders := grantedPIDs(hs)
	b.show(hs)
	if len(holders) == 0 {
		return fail(exitNothingHeld, "break: nothing to break: no session holds %s", b.target)
	}
	if err := b.checkPrivilege(ctx, holders); err != nil {
		return err
	}
	if !yes {
		if err := b.confirm(ctx, stdin, len(holders)); err != nil {
			return err
		}
	}
	terminated, err := b.terminate(ctx, holders, hs)
	if err != nil {
		return err
	}
	if len(terminated) == 0 {
		fmt.Fprintf(b.stdout, "%s changed hands meanwhile; nothing was terminated\n", display(b.target.String()))
		return nil
	}
	return b.waitReleased(ctx, terminated)
}

// show prints the holders and waiters as status does, and says that waiters are spared.
func (b *breaker) show(hs []advisory.Holder) {
	rows := make([]statusRow, len(hs))
	waiting := 0
	for i, h := range hs {
		rows[i] = toRow(h)
		if !h.Granted {
			waiting++
		}
	}
	fmt.Fprintln(b.stdout, display(b.target.String())+":")
	printTable(b.stdout, rows, time.Now(), b.target.none())
	if waiting > 0 && waiting < len(hs) {
		fmt.Fprintf(b.stdout, "%d waiting session(s) will not be terminated; one of them may take the lock.\n", waiting)
	}
}

func grantedPIDs(hs []advisory.Holder) []uint32 {
	var pids []uint32
	for _, h := range hs {
		if h.Granted {
			pids = append(pids, h.PID)
		}
	}
	return pids
}
