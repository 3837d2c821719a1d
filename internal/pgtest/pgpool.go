package pgtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// PgpoolConfig is how a Pgpool-II started by this package decides where a read-only
// statement goes. Both load-balance (load_balance_mode = on) between the primary and the
// standby, each weighing 1.
type PgpoolConfig int

const (
	// PgpoolDefaults leaves the function lists empty: Pgpool-II (4.x) then sends a
	// statement that calls a VOLATILE function (pg_advisory_lock, set_config, ...) to
	// the primary, and load-balances the rest. SQL comments stay significant
	// (allow_sql_comments = off): a SELECT that starts with a comment is not balanced.
	PgpoolDefaults PgpoolConfig = iota
	// PgpoolFunctionList is the configuration Pgpool-II's docs show for
	// write_function_list: only the functions listed there (nextval, setval and the
	// like) write, so every other function, pg_advisory_xact_lock included, is taken for
	// a read and may be balanced to the standby; allow_sql_comments = on, so a leading
	// comment no longer keeps a SELECT off the standby.
	PgpoolFunctionList
)

// String names the configuration for test names.
func (c PgpoolConfig) String() string {
	if c == PgpoolFunctionList {
		return "function-list"
	}
	return "defaults"
}

// Pgpool is a running Pgpool-II in streaming-replication mode in front of a primary
// (backend 0) and its hot standby (backend 1). Clients connect to DSN(). Close stops it.
type Pgpool struct {
	dir       string // pgpool.conf, pcp.conf, pool_hba.conf, pgpool.log, the pid file
	port, pcp int
	user, db  string
	cmd       *exec.Cmd
	exit      chan struct{} // closed when cmd has been waited for

	closeOnce sync.Once
	closeErr  error
}

// StartPgpool starts Debian's pgpool (as the postgres OS user when we are root, -n: in
// the foreground, its own configuration, pid file and sockets in a temp dir, free
// loopback ports for its listener and PCP) in front of primary and standby (a standby of
// primary, see [StartStandby]), with conf. It blocks until Pgpool-II serves a query and
// has found the primary among its backends, or ctx ends. It returns an error wrapping
// [ErrUnavailable] when pgpool is not installed. extra lines go at the end of pgpool.conf
// (a later setting overrides an earlier one). On error nothing is left running.
func StartPgpool(ctx context.Context, primary *Server, standby *Standby, conf PgpoolConfig, extra ...string) (*Pgpool, error) {
	bin, err := pgpoolBinary()
	if err != nil {
		return nil, err
	}
	up, err := pgconn.ParseConfig(primary.DSN())
	if err != nil {
		return nil, fmt.Errorf("pgtest: pgpool: parse the primary's DSN: %w", err)
	}
	sb, err := pgconn.ParseConfig(standby.DSN())
	if err != nil {
		return nil, fmt.Errorf("pgtest: pgpool: parse the standby's DSN: %w", err)
	}
	var lastErr error
	for try := 0; try < 3; try++ { // a free port may be taken before pgpool binds it
		p := &Pgpool{user: up.User, db: up.Database}
		if lastErr = p.start(ctx, bin, up, sb, conf, extra); lastErr == nil {
			return p, nil
		}
		if !strings.Contains(lastErr.Error(), "Address already in use") {
			break
		}
	}
	return nil, lastErr
}

func pgpoolBinary() (string, error) { return debianBinary("pgpool", "pgpool2") }

func (p *Pgpool) start(ctx context.Context, bin string, up, sb *pgconn.Config, conf PgpoolConfig, extra []string) error {
	dir, err := os.MkdirTemp("/tmp", "pgp")
	if err != nil {
		return err
	}
	p.dir = dir
	cred, err := pglocal.OwnDir(dir)
	if err == nil {
		p.port, err = pglocal.FreePort()
	}
	if err == nil {
		p.pcp, err = pglocal.FreePort()
	}
	if err == nil {
		err = p.writeConfig(up, sb, conf, extra, cred)
	}
	if err == nil {
		err = p.run(bin, cred)
	}
	if err == nil {
		err = p.waitReady(ctx)
	}
	if err != nil {
		p.Close()
	}
	return err
}

// run starts pgpool in the foreground, in a process group of its own, tied to this
// process (SIGQUIT, its immediate shutdown, if we die).
func (p *Pgpool) run(bin string, cred *syscall.Credential) error {
	out, err := os.OpenFile(filepath.Join(p.dir, "pgpool.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer out.Close()
	cmd := exec.Command(bin, "-n", "-f", filepath.Join(p.dir, "pgpool.conf"),
		"-F", filepath.Join(p.dir, "pcp.conf"), "-a", filepath.Join(p.dir, "pool_hba.conf"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: cred}
	cmd.Dir = p.dir
	cmd.Stdout, cmd.Stderr = out, out
	if err := pglocal.StartTied(cmd, syscall.SIGQUIT); err != nil {
		return fmt.Errorf("pgtest: pgpool: %w", err)
	}
	p.cmd, p.exit = cmd, make(chan struct{})
	go func(cmd *exec.Cmd, exit chan struct{}) { cmd.Wait(); close(exit) }(p.cmd, p.exit)
	return nil
}

// waitReady polls until a statement through Pgpool-II reaches the primary (a VOLATILE
// function's statement goes there in both configurations once Pgpool-II knows its
// primary: pg_is_in_recovery() is false), bounded by 30 s, ctx and the process's exit.
func (p *Pgpool) waitReady(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for {
		err := p.pingPrimary(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-p.exit:
			return fmt.Errorf("pgtest: pgpool exited during start-up: %s", p.Log())
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: pgpool not ready after 30s: %w\n%s", err, p.Log())
		}
	}
}

func (p *Pgpool) pingPrimary(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, WithParams(p.DSN(), map[string]string{"connect_timeout": "2"}))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	// /*NO LOAD BALANCE*/ sends a statement to the primary whatever the configuration.
	var standby bool
	if err := conn.QueryRow(ctx, "/*NO LOAD BALANCE*/ SELECT pg_is_in_recovery()").Scan(&standby); err != nil {
		return err
	}
	if standby {
		return errors.New("pgpool has not found the primary yet")
	}
	return nil
}

// DSN returns the keyword/value connection string of a client of Pgpool-II.
func (p *Pgpool) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=%s dbname=%s sslmode=disable", p.port, p.user, p.db)
}

// Port returns Pgpool-II's TCP port.
func (p *Pgpool) Port() int { return p.port }

// Log returns what Pgpool-II has logged so far (for test failure messages).
func (p *Pgpool) Log() string {
	data, _ := os.ReadFile(filepath.Join(p.dir, "pgpool.log"))
	return string(data)
}

// Close stops Pgpool-II, if it runs, and removes its files. It asks for a fast shutdown
// (SIGINT: client sessions are ended, so their backends end and release what they
// hold), and kills the process group if it has not exited within 10 s. It blocks until
// the process has exited. Later calls return the first call's result.
func (p *Pgpool) Close() error {
	p.closeOnce.Do(func() {
		if p.cmd != nil {
			p.closeErr = stopGroup(p.cmd, p.exit, syscall.SIGINT, "pgpool")
		}
		if err := os.RemoveAll(p.dir); err != nil && p.closeErr == nil {
			p.closeErr = err
		}
	})
	return p.closeErr
}
