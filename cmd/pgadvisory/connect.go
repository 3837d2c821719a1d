package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/connstr"
)

// connFlags are the connection flags of every command that connects. The zero value
// means "no --dsn", one connection attempt, and no messages about retries.
type connFlags struct {
	dsn     string
	timeout time.Duration // --connect-timeout: how long to retry a server that is not up yet
	stderr  io.Writer     // where retries are reported
	conns   int32         // the pool's size if not 0 (run --slots); 4 otherwise
}

// register defines --dsn on fs, defaulting to a --dsn given before the command, and
// --connect-timeout, defaulting to timeout.
func (c *connFlags) register(fs *flag.FlagSet, timeout time.Duration) {
	fs.StringVar(&c.dsn, "dsn", c.dsn, "PostgreSQL connection string")
	fs.DurationVar(&c.timeout, "connect-timeout", timeout, "retry a server that is not up yet for this long")
}

// check refuses a negative --connect-timeout.
func (c *connFlags) check(cmd string) error {
	if c.timeout < 0 {
		return usageError(cmd, "--connect-timeout %v: want 0 (one attempt) or more", c.timeout)
	}
	return nil
}

// connString returns --dsn, else $DATABASE_URL, else "": pgx then reads PGHOST, PGPORT,
// PGUSER, PGPASSWORD, PGDATABASE, PGSSLMODE and the other libpq variables.
func (c *connFlags) connString() (dsn, source string) {
	if c.dsn != "" {
		return c.dsn, "--dsn"
	}
	if dsn := os.Getenv("DATABASE_URL"); dsn != "" {
		return dsn, "$DATABASE_URL"
	}
	return "", "the PG* environment variables"
}

// connect returns a Manager for command cmd ("run", "status", ...) with a small pool whose
// sessions show appName in pg_stat_activity. ctx governs the connect; each attempt gives
// up after 30 s, and a server that is not up yet is retried for --connect-timeout (see
// retry). Errors never contain the password: they are ours, not pgx's (see
// parseProblem), and are redacted again when printed.
func (c *connFlags) connect(ctx context.Context, cmd, appName string, opts ...advisory.Option) (*advisory.Manager, error) {
	cfg, err := c.config(appName)
	if err != nil {
		return nil, err
	}
	cfg.MaxConns = 4 // one lock, one wait, and the status queries
	if c.conns > 0 {
		cfg.MaxConns = c.conns
	}
	var m *advisory.Manager
	gaveUp, err := c.attempts().retry(ctx, target(cfg), cfg.ConnConfig.Password, func(ctx context.Context) (err error) {
		m, err = advisory.NewWithConfig(ctx, cfg, opts...)
		return err
	})
	switch {
	case errors.Is(err, advisory.ErrInvalidOption):
		return nil, fail(exitUsage, "%v", err)
	case errors.Is(err, advisory.ErrPooler):
		return nil, poolerError(cmd, target(cfg), err)
	case err != nil:
		return nil, c.connectFailure(&cfg.ConnConfig.Config, err, gaveUp)
	}
	return m, nil
}

// connectPlain returns a plain connection for statements the library does not run
// (break's pg_terminate_backend), set up, retried and reported as connect's.
func (c *connFlags) connectPlain(ctx context.Context, appName string) (*pgx.Conn, error) {
	cfg, err := c.config(appName)
	if err != nil {
		return nil, err
	}
	var conn *pgx.Conn
	gaveUp, err := c.attempts().retry(ctx, target(cfg), cfg.ConnConfig.Password, func(ctx context.Context) (err error) {
		conn, err = pgx.ConnectConfig(ctx, cfg.ConnConfig)
		return err
	})
	if err != nil {
		return nil, c.connectFailure(&cfg.ConnConfig.Config, err, gaveUp)
	}
	return conn, nil
}

// config parses the connection settings and sets application_name to appName.
func (c *connFlags) config(appName string) (*pgxpool.Config, error) {
	dsn, source := c.connString()
	if err := checkScheme(dsn, source); err != nil {
		return nil, err
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fail(exitUsage, "invalid connection settings (from %s): %s", source, parseProblem(err))
	}
	if appName != "" {
		cfg.ConnConfig.RuntimeParams["application_name"] = appName
	}
	return cfg, nil
}

// urlScheme matches the scheme of a URL (RFC 3986: a letter, then letters, digits, "+",
// "-" and ".").
var urlScheme = regexp.MustCompile(`^([a-zA-Z][a-zA-Z0-9+.-]*)://`)

// checkScheme refuses a URL whose scheme is not postgres:// or postgresql://. pgx takes any
// other string for key=value settings: golang-migrate's pgx5://postgres@db:5432/app
// parsed without error and connected to the default Unix socket, and the message named
// that socket instead of the scheme.
func checkScheme(dsn, source string) error {
	m := urlScheme.FindStringSubmatch(dsn)
	if m == nil || m[1] == "postgres" || m[1] == "postgresql" {
		return nil
	}
	msg := fmt.Sprintf("the connection string (from %s) is a %s:// URL; pgadvisory takes postgres:// or "+
		"postgresql:// URLs, or key=value settings: write postgres://USER@HOST:PORT/DATABASE", source, m[1])
	if strings.HasPrefix(strings.ToLower(m[1]), "pgx") {
		msg += "; golang-migrate's " + m[1] + ":// URLs take x- parameters (x-migrations-table, ...), " +
			"which pgx would send to the server as settings: leave them out"
	}
	return fail(exitUsage, "%s", msg)
}

// parseProblem describes why a connection string did not parse without quoting it: pgx's
// message contains the string with the password masked only on a best-effort basis, and a
// *url.Error contains it raw.
func parseProblem(err error) string {
	var pe *pgconn.ParseConfigError
	if !errors.As(err, &pe) {
		return "it could not be parsed"
	}
	msg := err.Error()
	inner := pe.Unwrap()
	if inner != nil {
		msg = strings.TrimSuffix(msg, " ("+inner.Error()+")")
	}
	// pgx writes "cannot parse `CONNSTRING`: PROBLEM"; CONNSTRING may contain anything,
	// PROBLEM is one of pgx's fixed phrases.
	if i := strings.LastIndex(msg, "`: "); i >= 0 {
		msg = msg[i+3:]
	} else {
		msg = "it could not be parsed"
	}
	var ue *url.Error
	switch {
	case errors.As(inner, &ue):
		msg += " (not a valid URL; write postgres://USER:PASSWORD@HOST:PORT/DATABASE?PARAM=VALUE, " +
			"with special characters in the password %-encoded)"
	case inner != nil:
		msg += ": " + connstr.Redact(inner.Error())
	}
	return msg
}

// target describes where a config points, without the password.
func target(cfg *pgxpool.Config) string { return targetOf(&cfg.ConnConfig.Config) }

// defaultHolderName is the application_name run sets: "pgadvisory HOST/PID", where HOST is
// the pod name in Kubernetes. PostgreSQL keeps 63 bytes of it.
func defaultHolderName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "unknown-host"
	}
	return truncate(fmt.Sprintf("pgadvisory %s/%d", host, os.Getpid()), 63)
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
