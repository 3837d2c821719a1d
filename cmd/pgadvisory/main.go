// Command pgadvisory takes PostgreSQL advisory locks from the shell: flock(1) across
// machines, for running migrations from one pod of many.
//
//	pgadvisory run --key K [--wait DURATION | --no-wait] [--shared] -- CMD ARGS...
//	pgadvisory status [--key K] [--json]
//	pgadvisory hash K
//	pgadvisory demo
//
// The connection comes from --dsn, else DATABASE_URL, else the libpq PG* environment
// variables (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, ...).
//
// Exit codes: run passes on CMD's exit code (128+N if CMD died of signal N); other codes
// are 64 (usage), 69 (cannot connect), 70 (internal error), 75 (lock not acquired:
// --no-wait found it held, or --wait elapsed), 76 (lock lost while CMD ran; CMD was
// stopped), 126 (CMD not executable), 127 (CMD not found), and 128+N when pgadvisory
// itself got signal N while connecting or waiting (130 for SIGINT, 143 for SIGTERM).
package main

import (
	"errors"
	"fmt"
	"io"
	"os"
)

// Exit codes; see the package doc.
const (
	exitOK          = 0
	exitUsage       = 64 // EX_USAGE
	exitUnavailable = 69 // EX_UNAVAILABLE: cannot connect
	exitSoftware    = 70 // EX_SOFTWARE: internal error
	exitNotAcquired = 75 // EX_TEMPFAIL: try again later
	exitLost        = 76 // the lock was lost while CMD ran
	exitCannotExec  = 126
	exitNotFound    = 127
	exitSignalBase  = 128 // 128+N: killed by (CMD) or interrupted by (pgadvisory) signal N
)

const usage = `pgadvisory: PostgreSQL advisory locks from the shell

Usage:
  pgadvisory run --key K [--wait DURATION | --no-wait] [--shared] [flags] -- CMD [ARGS...]
      Hold the lock K while CMD runs (like flock(1), across machines).
  pgadvisory status [--key K] [--json]
      List the sessions holding or waiting for advisory locks.
  pgadvisory hash K
      Print the key of lock name K and the psql statements that take the same lock.
  pgadvisory demo
      Start a throwaway PostgreSQL and show workers contending for a lock.

Connection: --dsn, else DATABASE_URL, else libpq's PG* variables.
Run 'pgadvisory COMMAND -h' for a command's flags.

Exit codes: run passes on CMD's exit code; 64 usage, 69 cannot connect, 70 internal error,
75 not acquired, 76 lock lost while CMD ran (CMD was stopped), 126/127 CMD not
executable/not found, 130/143 (128+N) interrupted by SIGINT/SIGTERM while connecting or
waiting (CMD was not started).
`

func main() {
	os.Exit(realMain(os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return exitUsage
	}
	cmd, rest := args[0], args[1:]
	var err error
	switch cmd {
	case "run":
		return runCommand(rest, stderr)
	case "status":
		err = statusCommand(rest, stdout, stderr)
	case "hash":
		err = hashCommand(rest, stdout, stderr)
	case "demo":
		err = demoCommand(rest, stdout, stderr)
	case "demo-migrate":
		err = demoMigrate(rest, stdout)
	case "-h", "-help", "--help", "help":
		fmt.Fprint(stdout, usage)
		return exitOK
	default:
		fmt.Fprintf(stderr, "pgadvisory: unknown command %q\n\n%s", cmd, usage)
		return exitUsage
	}
	return exitCode(err, stderr)
}

// exitError carries an exit code and a message.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func fail(code int, format string, args ...any) error {
	return &exitError{code, fmt.Errorf(format, args...)}
}

// exitCode prints err (if any) and returns its exit code.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.err.Error() != "" {
			fmt.Fprintln(stderr, "pgadvisory:", ee.err)
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "pgadvisory:", err)
	return exitSoftware
}
