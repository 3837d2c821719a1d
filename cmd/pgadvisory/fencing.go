package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory"
)

// Environment variables run sets for CMD besides lockFDEnv.
const (
	keyEnv        = "PGADVISORY_KEY"         // the lock's int64 key, in decimal
	tokenEnv      = "PGADVISORY_TOKEN"       // the fencing token (--token only)
	fenceTableEnv = "PGADVISORY_FENCE_TABLE" // the fencing table, quoted for SQL (--token only)
	// appNameEnv is the holding's work tag alone, as PGAPPNAME carries it (with the
	// pooled mark where the command's server may be a transaction pooler: see
	// Lock.WorkEnv): the application_name for a tool whose connection string sets one
	// (PGAPPNAME, which run also sets, is then ignored).
	appNameEnv = "PGADVISORY_APPNAME"
)

// fenceFlags are the fencing flags: --token (run only) and --fence-table.
type fenceFlags struct {
	token bool
	table string // as given: "table" or "schema.table"; "" for the default
}

func (f *fenceFlags) register(fs *flag.FlagSet, withToken bool) {
	if withToken {
		fs.BoolVar(&f.token, "token", false, "take a fencing token and export it as "+tokenEnv)
	}
	fs.StringVar(&f.table, "fence-table", "", "fencing table, [schema.]table (default "+advisory.DefaultFenceTable+")")
}

// parts splits --fence-table into the schema and table names WithFenceTable takes.
func (f *fenceFlags) parts() []string {
	if f.table == "" {
		return []string{advisory.DefaultFenceTable}
	}
	return strings.Split(f.table, ".")
}

// check validates --fence-table as WithFenceTable would, so that a bad name is a usage
// error found before connecting.
func (f *fenceFlags) check(cmd string) error {
	parts := f.parts()
	if len(parts) > 2 {
		return usageError(cmd, "--fence-table %s: want TABLE or SCHEMA.TABLE", f.table)
	}
	for _, p := range parts {
		if p == "" || len(p) > 63 || !utf8.ValidString(p) || strings.ContainsRune(p, 0) {
			return usageError(cmd, "--fence-table %s: each name must be 1 to 63 bytes of UTF-8 without NUL", f.table)
		}
	}
	return nil
}

func (f *fenceFlags) options() []advisory.Option {
	return []advisory.Option{advisory.WithFenceTable(f.parts()...)}
}

// sql is the table's name as SQL, quoted: what PGADVISORY_FENCE_TABLE holds.
func (f *fenceFlags) sql() string { return pgx.Identifier(f.parts()).Sanitize() }

// createHint is the command that creates the table named by the flags.
func (f *fenceFlags) createHint() string {
	if f.table == "" {
		return "pgadvisory init-fencing"
	}
	return "pgadvisory init-fencing --fence-table " + f.table
}

// takeToken takes the lock's fencing token (--token). ctx ends it (a signal). On failure
// the caller releases the lock; a missing table says how to create it, an earlier
// version's how to upgrade it.
func (r *runner) takeToken(ctx context.Context, l *advisory.Lock) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	tok, err := l.Token(ctx)
	switch {
	case err == nil:
		return tok, nil
	case errors.Is(err, advisory.ErrNoFenceTable) && !missingTable(err):
		return 0, &exitError{code: exitUnavailable,
			err:  fmt.Errorf(`%s: --token: %v; the command was not started`, r.lock.label(), err),
			hint: "Upgrade it once (it needs ownership of the table) with: " + r.fence.createHint()}
	case errors.Is(err, advisory.ErrNoFenceTable):
		return 0, &exitError{code: exitUnavailable,
			err: fmt.Errorf(`%s: --token: the fencing table %s does not exist; the command was not started`,
				r.lock.label(), r.fence.sql()),
			hint: "Create it once (it needs the CREATE privilege on the schema) with: " + r.fence.createHint()}
	case errors.Is(err, advisory.ErrLockLost):
		return 0, fail(exitLost, `%s was lost while taking its fencing token: %v; the command was not started`, r.lock.label(), err)
	}
	return 0, fail(exitUnavailable, `%s: cannot take a fencing token: %v; the command was not started`, r.lock.label(), err)
}

// missingTable reports whether err, wrapping ErrNoFenceTable, says that the table does
// not exist (SQLSTATE 42P01), not that it has an earlier version's layout.
func missingTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// commandEnv is CMD's environment: environ (pgadvisory's own, with lockFDEnv) with the
// holding's work identity for libpq and pgx (PGAPPNAME and PGOPTIONS, see Lock.WorkEnv),
// appNameEnv, the key and, with --token, the token.
func (r *runner) commandEnv(l *advisory.Lock, environ []string) []string {
	env := append(l.WorkEnv(environ), appNameEnv+"="+commandTag(l, environ), keyEnv+"="+l.Key().String())
	if r.fence.token {
		env = append(env, tokenEnv+"="+strconv.FormatInt(r.tok, 10), fenceTableEnv+"="+r.fence.sql())
	}
	return env
}

// commandTag is the tag that Lock.WorkEnv puts into PGAPPNAME for environ's server, alone.
func commandTag(l *advisory.Lock, environ []string) string {
	tag := l.WorkAppName("")
	for _, kv := range l.WorkEnv(append(slices.Clip(environ), "PGAPPNAME=")) {
		if v, ok := strings.CutPrefix(kv, "PGAPPNAME="); ok {
			tag = v
		}
	}
	return tag
}

// initFencingCommand creates the fencing table if it does not exist, and upgrades one of
// an earlier version's layout.
func initFencingCommand(args []string, global connFlags, stdout io.Writer) error {
	fs := flag.NewFlagSet("pgadvisory init-fencing", flag.ContinueOnError)
	conn := global
	var fence fenceFlags
	fence.register(fs, false)
	conn.register(fs, 0)
	if err := parseFlags(fs, args, initFencingHelp, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fs.Name(), `unexpected argument "%s"`, fs.Arg(0))
	}
	if err := fence.check(fs.Name()); err != nil {
		return err
	}
	if err := conn.check(fs.Name()); err != nil {
		return err
	}
	m, err := conn.connect(context.Background(), "init-fencing", "pgadvisory init-fencing", fence.options()...)
	if err != nil {
		return err
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := m.CreateFenceTable(ctx); err != nil {
		return fail(exitUnavailable, "%v", err)
	}
	fmt.Fprintln(stdout, display(fmt.Sprintf("fencing table %s is ready; pgadvisory run --token%s takes tokens from it",
		fence.sql(), strings.TrimPrefix(fence.createHint(), "pgadvisory init-fencing"))))
	return nil
}
