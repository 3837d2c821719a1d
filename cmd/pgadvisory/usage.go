package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

const connectionHelp = `Connection: --dsn, else $DATABASE_URL, else libpq's PG* variables (PGHOST, PGPORT,
PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE, ...). --dsn may also come before the command.
Passwords are never printed.
`

// connectTimeoutHead, the default and connectTimeoutTail are the flag lines of
// --connect-timeout.
const (
	connectTimeoutHead = `  --connect-timeout DURATION
                      retry, with backoff, a server that is not up yet (connection
                      refused, host not found, "the database system is starting up",
                      too many connections) for up to DURATION (default `
	connectTimeoutTail = `;
                      0 tries once); a wrong password, an unknown role or database,
                      a statement pooler or a standby fail at once (69)
`
)

const mainHelp = `pgadvisory: PostgreSQL advisory locks from the shell

Usage:
  pgadvisory [--dsn DSN] COMMAND [flags] [args]
  pgadvisory --help | --version

Commands:
  run      hold a lock while a command runs (like flock(1), across machines);
           --slots N: one of N slots, at most N commands at once
  status   list the sessions holding or waiting for advisory locks (--watch: keep refreshing)
  break    terminate the session(s) holding a lock, after confirmation
  hash     print the key of a lock name and the psql lines that take the same lock
  init-fencing
           create the fencing table that run --token takes tokens from
  demo     start a throwaway PostgreSQL and show workers contending for a lock
  help     print the help of a command: pgadvisory help run

` + connectionHelp + `
` + exitCodesHelp

const initFencingHelp = `Usage: pgadvisory init-fencing [--fence-table [SCHEMA.]TABLE] [--dsn DSN]

Creates the fencing table that pgadvisory run --token (and the library's Lock.Token and
Manager.CheckToken) counts tokens in, if it does not exist: one row per lock that ever
took a token (key bigint, pair boolean: true for a two-int4 key; token bigint, taken_at
timestamptz; primary key (key, pair)). A table of an earlier version (key bigint primary
key, no pair column) is upgraded in place in one transaction, keeping its tokens; upgrade
every process that takes tokens first (an earlier version's --token then fails: no
unique constraint matching its ON CONFLICT). Creating needs the CREATE privilege on the
schema, upgrading ownership of the table; the roles that run --token need INSERT, UPDATE
and SELECT on the table, and the writers that check tokens SELECT and UPDATE (for FOR
SHARE). Running it again changes nothing; runs from many hosts at once are safe.

Flags:
  --fence-table [SCHEMA.]TABLE   the table (default advisory_fence, created in the first
                                 schema of the search_path)
  --dsn DSN                      connection string (default $DATABASE_URL, else the PG*
                                 variables)
` + connectTimeoutHead + "0" + connectTimeoutTail + `
` + connectionHelp + `
Exit codes: 0 success (the table exists, in the current layout), 64 usage error, 69
server unavailable or the table cannot be created or upgraded (e.g. no CREATE privilege,
not the table's owner).
`

const statusHelp = `Usage: pgadvisory status [--name NAME | --key KEY] [--json] [--watch[=INTERVAL]] [--dsn DSN]

Lists the sessions holding or waiting for advisory locks in the database: key, name (for
locks taken by this tool or library), mode, state, pid, application_name, client and for
how long. CLIENT is "local" for a Unix-socket session and "(hidden)" for another role's
session whose details this role may not see (GRANT pg_read_all_stats shows them; in
--json: "client_hidden": true). Names and other text from the server are printed escaped
(\n, \x1b, \u202e, ...).
PID is the server's backend process id (pg_terminate_backend takes it; pgadvisory break
does it for you). A lock of a pgadvisory run that was killed stays listed as holding,
under the dead run's application_name, until its command (and what the command started
with the lock's descriptor) has exited: see docs/run.md.

With --watch the listing is looked at every INTERVAL (2s by default) until SIGINT or
SIGTERM: redrawn in place each time when standard output is a terminal; when it is not,
printed as one block after another (each under a line with the time) only when it changed;
with --json, one JSON array per block. A failed query is shown and retried at the next look.

With --name or --key only the sessions of that lock are listed; when there are none,
status says which key (and name) it looked for. With --json that is an empty array.

Behind a transaction pooler (PgBouncer pool_mode=transaction, Supabase, Neon, RDS Proxy)
status shows what it shows on PostgreSQL itself: every session's locks, under the server
pids of the pooler's server connections (a lock held as a transaction, as the library
holds them there, is listed as any other). A statement pooler is refused (69).

Flags:
` + lockFlagsHelp + `  --json              print a JSON array with stable field names, values exactly as on
                      the server
  --watch[=INTERVAL]  refresh every INTERVAL (default 2s) until interrupted; write
                      --watch=5s (with "=")
  --dsn DSN           connection string (default $DATABASE_URL, else the PG* variables)
` + connectTimeoutHead + "0" + connectTimeoutTail + `
` + connectionHelp + `
Exit codes: 0 success (also when no lock matches), 64 usage error, 69 server unavailable
or a statement-pooling proxy; with --watch, 130 or 143 when SIGINT or SIGTERM ends it
(128+N for signal N).
`

const hashHelp = `Usage: pgadvisory hash NAME
       pgadvisory hash --slots N NAME
       pgadvisory hash --namespace NS [--slots N] NAME

Prints the 64-bit key of lock name NAME (PostgreSQL's hashtextextended(NAME, 0)) and the
psql lines that take, try and release the same lock, for operators: the session lines for
a direct connection (or a session pooler), then the transaction form for a transaction
pooler (BEGIN; SELECT pg_advisory_xact_lock(KEY); ... COMMIT;), where a session lock
would stay on a pooled server connection. The SQL literal is
correct whatever standard_conforming_strings says; names with control characters are
written in the E'...' form with escapes. Needs no database. For a name that starts with
'-', write: pgadvisory hash -- NAME

  --slots N    also print the keys of the semaphore NAME with limit N (Go:
               Manager.Semaphore(NAME, N)): its slots "NAME#slot/0" ... "NAME#slot/N-1"
               and its turnstile "NAME#turnstile"
  --namespace NS
               the lock is "NS:NAME", as the library's WithNamespace(NS) names it
               (run, status and break take --namespace NS --name NAME for it)

Exit codes: 0 success, 64 usage error (no name, several names, or an invalid name).
`

const demoHelp = `Usage: pgadvisory demo

Starts a throwaway PostgreSQL (postgres:16-alpine run with the docker CLI if a Docker
engine answers, else the local PostgreSQL server binaries, e.g. apt-get install
postgresql; ADVISORY_TEST_DSN names an existing server instead) and three worker
processes, each running

    pgadvisory run --name migrations --drain-wait 300ms -- <a six-step migration>

The migration applies its steps in one transaction on a connection of its own, tagged
through PGAPPNAME and PGOPTIONS; each step writes a row of table pgadvisory_demo.

The demo SIGKILLs the first holder's pgadvisory during step 4 (the kernel kills its
migration too; the next worker takes over within milliseconds, and before it migrates it
terminates the dead worker's migration session, still running step 4 on the server, so
that its transaction is rolled back). It ends the second holder's session with
pg_terminate_backend (it is told at once, stops its migration and exits 76; the third
worker drains its migration session too). It prints a timeline, then the table: each
step once, all by the third worker. Takes about 10 s. Ctrl-C stops the workers and
removes the server (docker rm -f for a container).

Exit codes: 0 success, 69 no server could be started, 70 internal error (or a table that
does not show each step once), 130 interrupted.
`

// helpShown is returned by parseFlags after it printed the help.
var helpShown = errors.New("help shown")

// parseFlags parses args with fs, whose flags must all have been defined. -h, -help and
// --help print help to stdout and return helpShown. Any other problem returns a usage
// error that says what is wrong; nothing is printed.
func parseFlags(fs *flag.FlagSet, args []string, help string, stdout io.Writer) error {
	fs.SetOutput(io.Discard)
	fs.Usage = func() {}
	var bad badValue
	fs.VisitAll(func(f *flag.Flag) { f.Value = &recordingValue{f.Value, f.Name, &bad} })
	if err := missingValue(fs, args); err != nil {
		return err
	}
	err := fs.Parse(args)
	switch {
	case err == nil:
		return nil
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stdout, help)
		return helpShown
	case bad.err != nil:
		return usageError(fs.Name(), "--%s %s: %v", bad.flag, bad.value, bad.err)
	}
	if msg := unknownFlag(fs, err.Error()); msg != "" {
		return usageError(fs.Name(), "%s", msg)
	}
	return usageError(fs.Name(), "%v", err)
}

// usageError is an exit-64 error of command cmd ("pgadvisory run"), with a pointer to its help.
func usageError(cmd, format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	if sub, ok := strings.CutPrefix(cmd, "pgadvisory "); ok {
		err = fmt.Errorf("%s: %w", sub, err)
	}
	return &exitError{code: exitUsage, err: err, hint: fmt.Sprintf("Run '%s --help' for usage.", cmd)}
}

// missingValue catches a value flag followed by another flag or by "--" instead of its
// value: `--key $EMPTY -- cmd` would otherwise lock the name "--" and run cmd.
func missingValue(fs *flag.FlagSet, args []string) error {
	for i := 0; i < len(args); i++ {
		name, hasValue := flagName(args[i])
		if name == "" {
			return nil // the first non-flag argument, or "--": flags end here
		}
		f := fs.Lookup(name)
		if hasValue || f == nil || isBoolFlag(f) || i+1 == len(args) {
			continue
		}
		next := args[i+1]
		if nextName, _ := flagName(next); next == "--" || (nextName != "" && fs.Lookup(nextName) != nil) {
			return usageError(fs.Name(), "--%s needs a value, not the flag %s (an empty shell variable?); "+
				"write --%s=VALUE for a value that starts with '-'", name, next, name)
		}
		i++
	}
	return nil
}

// flagName returns the name of a flag argument ("--key" or "-key=v" → "key") and whether
// the value is in the same argument; "" if arg is not a flag.
func flagName(arg string) (name string, hasValue bool) {
	if len(arg) < 2 || arg[0] != '-' || arg == "--" {
		return "", false
	}
	name = strings.TrimPrefix(strings.TrimPrefix(arg, "-"), "-")
	name, _, hasValue = strings.Cut(name, "=")
	return name, hasValue
}

func isBoolFlag(f *flag.Flag) bool {
	b, ok := f.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// badValue is the first flag value that did not parse.
type badValue struct {
	flag, value string
	err         error
}

// recordingValue wraps a flag's Value to keep the raw text of a bad value, so that the
// message about it is ours: the flag package's quotes it with %q, which would hide the
// escaping and the password masking that display does, and says only "parse error" for
// a duration without a unit.
type recordingValue struct {
	flag.Value
	name string
	bad  *badValue
}

func (v *recordingValue) Set(s string) error {
	err := v.Value.Set(s)
	if err != nil && v.bad.err == nil {
		*v.bad = badValue{v.name, s, valueProblem(v.Value, s)}
	}
	return err
}

func (v *recordingValue) IsBoolFlag() bool { return isBoolFlag(&flag.Flag{Value: v.Value}) }

// valueProblem says what is wrong with s as a value of v.
func valueProblem(v flag.Value, s string) error {
	if _, ok := v.(*roleList); ok {
		return v.Set(s)
	}
	g, ok := v.(flag.Getter)
	if !ok {
		return errors.New("invalid value")
	}
	switch g.Get().(type) {
	case time.Duration:
		if strings.Trim(s, "0123456789.") == "" {
			return errors.New("missing unit: use a unit: 10s, 5m")
		}
		return errors.New("not a duration: use a number and a unit: 10s, 5m, 1h30m")
	case bool:
		return errors.New("not a boolean: use true or false")
	}
	return errors.New("invalid value")
}
