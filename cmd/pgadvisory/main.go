// Command pgadvisory takes PostgreSQL advisory locks from the shell: flock(1) across
// machines, for running migrations from one pod of many.
//
//	pgadvisory run (--name NAME | --key KEY) [--wait DURATION | --no-wait] [--shared] [--token] [--connect-timeout DURATION] -- CMD ARGS...
//	pgadvisory run --slots N --name NAME [flags] -- CMD ARGS...
//	pgadvisory status [--name NAME | --key KEY] [--json] [--watch[=INTERVAL]]
//	pgadvisory break (--name NAME | --key KEY) [--yes] [--wait DURATION]
//	pgadvisory hash [--namespace NS] NAME
//	pgadvisory init-fencing [--fence-table [SCHEMA.]TABLE]
//	pgadvisory demo
//
// --namespace NS with --name NAME selects the lock "NS:NAME", as the library's
// WithNamespace(NS) names it. run --slots N takes one of N slots of the semaphore NAME
// (advisory's Manager.Semaphore) instead of the lock: at most N commands at once.
//
// The connection comes from --dsn (before or after the command), else DATABASE_URL, else
// the libpq PG* environment variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE,
// PGSSLMODE, ...). A server that is not up yet (connection refused, "the database system
// is starting up") is retried for --connect-timeout (30s for run, so that an init
// container waits for its database; no retries for the other commands unless asked).
// Passwords are never printed, and every string that comes from the
// server or the command line is escaped in human-readable output.
//
// run's command inherits the lock's connection as descriptor 3 (PGADVISORY_LOCK_FD=3), as
// flock(1)'s command inherits the lock file: if pgadvisory is killed, the lock stays held
// until the command, and whatever it started with that descriptor, has exited. It also
// gets the lock's key (PGADVISORY_KEY) and, with --token, a fencing token
// (PGADVISORY_TOKEN, PGADVISORY_FENCE_TABLE) taken from the table init-fencing creates.
// Its own sessions are tagged as the holding's work (PGAPPNAME, PGOPTIONS,
// PGADVISORY_APPNAME), and before it starts, run drains the sessions of earlier holders'
// work (advisory's Lock.Drain), so that no dead holder's migration runs beside it.
//
// Exit codes (the table is in `pgadvisory run --help`): run passes on CMD's exit code
// (128+N if CMD died of signal N); other codes are 64 (usage), 69 (server unavailable),
// 70 (internal error), 75 (lock not acquired: --no-wait found it held, or --wait
// elapsed, unless --conflict-exit-code names another code; or an earlier holder's session
// outlived its termination), 76 (lock lost while
// CMD ran; CMD was stopped), 77 (not allowed to terminate an earlier holder's session),
// 126 (CMD not executable), 127 (CMD not found), and 128+N when pgadvisory itself got
// signal N while connecting, waiting or draining (130 for SIGINT, 143 for SIGTERM).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
)

// Exit codes; see exitCodesHelp.
const (
	exitOK          = 0
	exitUsage       = 64 // EX_USAGE
	exitUnavailable = 69 // EX_UNAVAILABLE: cannot connect, server error
	exitSoftware    = 70 // EX_SOFTWARE: internal error
	exitNotAcquired = 75 // EX_TEMPFAIL: try again later
	exitLost        = 76 // the lock was lost while CMD ran
	exitNoPerm      = 77 // EX_NOPERM: not allowed to terminate a session (break's holder, run's earlier holder's work)
	exitCannotExec  = 126
	exitNotFound    = 127
	exitSignalBase  = 128 // 128+N: killed by (CMD) or interrupted by (pgadvisory) signal N
)

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
}

func realMain(args []string, stdin *os.File, stdout, stderr io.Writer) int {
	global := connFlags{stderr: stderr}
	args, err := global.parseGlobal(args, stdout)
	if err != nil {
		return exitCode(err, stderr)
	}
	if len(args) == 0 {
		return exitCode(usageError("pgadvisory", "no command given"), stderr)
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "run":
		return runCommand(rest, global, stdout, stderr)
	case "status":
		err = statusCommand(rest, global, stdout)
	case "break":
		err = breakCommand(rest, global, stdin, stdout, stderr)
	case "hash":
		err = hashCommand(rest, stdout)
	case "init-fencing":
		err = initFencingCommand(rest, global, stdout)
	case "demo":
		err = demoCommand(rest, stdout)
	case "demo-migrate":
		err = demoMigrate(rest, stdout)
	case "help":
		err = helpCommand(rest, stdout)
	default:
		err = usageError("pgadvisory", `unknown command "%s"`, cmd)
	}
	return exitCode(err, stderr)
}

// parseGlobal reads the flags before the command: --dsn, --help, --version. It returns the
// command and its arguments.
func (c *connFlags) parseGlobal(args []string, stdout io.Writer) ([]string, error) {
	for len(args) > 0 {
		switch name, _ := flagName(args[0]); name {
		case "":
			if args[0] == "--" {
				args = args[1:]
			}
			return args, nil
		case "h", "help":
			fmt.Fprint(stdout, mainHelp)
			return nil, helpShown
		case "version":
			fmt.Fprintln(stdout, "pgadvisory", version())
			return nil, helpShown
		case "dsn":
			n, err := c.parseDSNFlag(args)
			if err != nil {
				return nil, err
			}
			args = args[n:]
		default:
			return nil, usageError("pgadvisory", "unknown flag %s before the command "+
				"(only --dsn, --help and --version go there)", args[0])
		}
	}
	return args, nil
}

// parseDSNFlag reads "--dsn=X" or "--dsn X" at args[0] and returns how many arguments it took.
func (c *connFlags) parseDSNFlag(args []string) (int, error) {
	if _, v, ok := strings.Cut(args[0], "="); ok {
		c.dsn = v
		return 1, nil
	}
	if len(args) < 2 || args[1] == "--" {
		return 0, usageError("pgadvisory", "--dsn needs a value")
	}
	c.dsn = args[1]
	return 2, nil
}

func helpCommand(args []string, stdout io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, mainHelp)
		return nil
	}
	help, ok := map[string]string{"run": runHelp, "status": statusHelp, "break": breakHelp, "hash": hashHelp,
		"demo": demoHelp, "init-fencing": initFencingHelp}[args[0]]
	if !ok || len(args) > 1 {
		return usageError("pgadvisory", "help takes one of run, status, break, hash, demo, init-fencing; got %s",
			strings.Join(args, " "))
	}
	fmt.Fprint(stdout, help)
	return nil
}

// exitError carries an exit code, a message and an optional hint, all printed on stderr.
type exitError struct {
	code int
	err  error
	hint string // trusted text printed as it is, on its own line (e.g. where the help is)
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func fail(code int, format string, args ...any) error {
	return &exitError{code: code, err: fmt.Errorf(format, args...)}
}

// exitCode prints err (if any) and returns its exit code. The message goes through
// display: passwords masked, untrusted text escaped.
func exitCode(err error, stderr io.Writer) int {
	if err == nil || errors.Is(err, helpShown) {
		return exitOK
	}
	code := exitSoftware
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	fmt.Fprintln(stderr, "pgadvisory: "+display(err.Error()))
	if ee != nil && ee.hint != "" {
		fmt.Fprintln(stderr, ee.hint)
	}
	return code
}

// validConflictCode says whether --conflict-exit-code may be code: 1 to 125 (126 and up
// are the shell's codes for a command that cannot run or died of a signal, 0 would say the
// command succeeded), except the codes that mean something else for run. 75 is the default.
func validConflictCode(code int) bool {
	switch code {
	case exitUsage, exitUnavailable, exitSoftware, exitLost, exitNoPerm:
		return false
	}
	return code >= 1 && code <= 125
}
