package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// Cluster is a running cluster started by [Start]. Its methods are safe for concurrent
// use, except that Restart and Close must not run concurrently with each other.
type Cluster struct {
	opts Options
	bin  string // directory holding initdb and postgres
	dir  string // temp dir: data/, socket, log
	port int
	cred *syscall.Credential // nil unless running as root
	cmd  *exec.Cmd
	exit chan struct{} // closed when cmd has been waited for
	dog  *watchdog     // removes dir if the caller dies without Close
	// floors holds, for a standby, the primary's values of the settings it may not set
	// lower (see standbyFloors).
	floors map[string]int
	// slot is a standby's replication slot on the primary at slotOn ("" if none).
	slot, slotOn string
}

// DSN returns a keyword/value connection string for the superuser postgres over TCP on
// 127.0.0.1 (trusted: no password).
func (c *Cluster) DSN() string {
	return fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", c.port)
}

// Port returns the server's loopback TCP port.
func (c *Cluster) Port() int { return c.port }

// Restart stops the server (fast shutdown: sessions are terminated) and starts it again on
// the same port. It blocks until the server accepts connections again or ctx ends.
func (c *Cluster) Restart(ctx context.Context) error {
	c.stopServer()
	return c.start(ctx)
}

// Crash stops the server the way a crash does, and starts it again, which runs crash
// recovery. It sends SIGQUIT (PostgreSQL's immediate shutdown): every server process
// exits at once, without a checkpoint and without writing its WAL buffers, which are lost
// with its shared memory, as in a crash of the server (though not of the OS, whose page
// cache survives). SIGKILL would not do: each backend leads a process group of its own,
// and a new postmaster refuses to start while one still lingers. It blocks until the
// server accepts connections again.
func (c *Cluster) Crash(ctx context.Context) error {
	c.Kill()
	return c.start(ctx)
}

// Kill stops the server as Crash does (SIGQUIT, an immediate shutdown) and leaves it
// stopped; [Cluster.Start] starts it again. It returns once every server process has exited.
func (c *Cluster) Kill() {
	if c.cmd != nil {
		c.cmd.Process.Signal(syscall.SIGQUIT) // the postmaster exits after its children
		<-c.exit
		c.cmd = nil
	}
}

// Stop stops the server (fast shutdown: sessions are terminated) and leaves it stopped.
func (c *Cluster) Stop() { c.stopServer() }

// Start starts a stopped server again on the same port (nothing if it runs). It blocks
// until the server accepts connections or ctx ends.
func (c *Cluster) Start(ctx context.Context) error {
	if c.cmd != nil {
		return nil
	}
	return c.start(ctx)
}

// Follow stops the server, replaces its data directory with a fresh base backup of the
// primary at primaryDSN (pg_basebackup -R: a streaming hot standby of it) and starts it
// on the same port. It is how a failed primary whose WAL went further than the promoted
// standby's rejoins as the new standby. It blocks until the server accepts connections.
func (c *Cluster) Follow(ctx context.Context, primaryDSN string) error {
	c.stopServer()
	if err := os.RemoveAll(filepath.Join(c.dir, "data")); err != nil {
		return err
	}
	if err := c.basebackup(ctx, primaryDSN); err != nil {
		return err
	}
	return c.start(ctx)
}

// Close stops the server and removes its directory; a standby's replication slot is
// dropped on its primary (an error if it could not be, unless the primary is gone). A
// second Close only removes the directory again, which is gone: it returns nil. A caller
// that dies without Close leaves nothing behind either: the server gets a parent-death
// signal and a watchdog process removes the directory.
func (c *Cluster) Close() error {
	c.stopServer()
	slotErr := c.dropSlot()
	if c.dir == "" {
		return slotErr
	}
	err := os.RemoveAll(c.dir)
	c.dog.stop()
	c.dog = nil
	return errors.Join(slotErr, err)
}

// start runs postgres in its own process group and waits until it accepts connections.
func (c *Cluster) start(ctx context.Context) error {
	logf, err := os.OpenFile(filepath.Join(c.dir, "server.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o666)
	if err != nil {
		return err
	}
	defer logf.Close()
	args := []string{"-D", filepath.Join(c.dir, "data"), "-p", strconv.Itoa(c.port), "-k", c.dir,
		"-c", "listen_addresses=" + strings.Join(append([]string{"127.0.0.1"}, c.opts.ListenAddresses...), ","),
		"-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
		// A new WAL segment is made by a seek, not by writing its 16 MB of zeros: a server
		// that switches segments often (pg_switch_wal, base backups) would copy them in the
		// kernel, a test server's largest file work on a tmpfs.
		"-c", "wal_init_zero=off",
		"-c", "max_connections=" + c.atLeast("max_connections", 300), "-c", "shared_buffers=64MB",
		// What a streaming standby (Options.BaseBackupFrom) needs of its primary; initdb's
		// pg_hba.conf already admits replication from 127.0.0.1 with -A trust. A test
		// package runs up to 7 standbys of its server at once, each with a slot, and a base
		// backup takes two senders.
		"-c", "wal_level=replica", "-c", "max_wal_senders=" + c.atLeast("max_wal_senders", 20),
		"-c", "max_replication_slots=20"}
	for _, name := range []string{"max_worker_processes", "max_prepared_transactions", "max_locks_per_transaction"} {
		if v, ok := c.floors[name]; ok {
			args = append(args, "-c", name+"="+strconv.Itoa(v))
		}
	}
	for _, kv := range c.opts.Settings { // later -c options win
		args = append(args, "-c", kv)
	}
	cmd := c.command(context.Background(), "postgres", args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := StartTied(cmd, syscall.SIGQUIT); err != nil { // SIGQUIT: immediate shutdown
		return fmt.Errorf("postgres: %w", err)
	}
	c.cmd, c.exit = cmd, make(chan struct{})
	go func(exit chan struct{}) { cmd.Wait(); close(exit) }(c.exit)
	return c.waitReady(ctx)
}

// atLeast returns v, or the primary's value of the setting name if the server is a
// standby and that is higher (see standbyFloors).
func (c *Cluster) atLeast(name string, v int) string {
	return strconv.Itoa(max(v, c.floors[name]))
}

// errPortTaken means another process listened on the cluster's port first.
var errPortTaken = errors.New("the port is taken by another process")

// waitReady waits until our server answers on the port. A server that answers there
// but is not ours (another cluster took the port between FreePort and our bind, and ours
// exits with "Address already in use") is not taken for ours: its data directory
// differs.
func (c *Cluster) waitReady(ctx context.Context) error {
	dsn := c.DSN() + " connect_timeout=2"
	deadline := time.Now().Add(60 * time.Second)
	for {
		err := c.ours(ctx, dsn)
		if err == nil {
			return nil
		}
		select {
		case <-c.exit:
			log, _ := os.ReadFile(filepath.Join(c.dir, "server.log"))
			if strings.Contains(string(log), "already in use") {
				return fmt.Errorf("%w: port %d: %s", errPortTaken, c.port, log)
			}
			return fmt.Errorf("postgres exited during start-up: %s", log)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("postgres not ready after 60s: %w", err)
		}
	}
}

// ours connects and checks that the server is this cluster: its data directory.
func (c *Cluster) ours(ctx context.Context, dsn string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		return err
	}
	want := filepath.Join(c.dir, "data")
	if real, err := filepath.EvalSymlinks(want); err == nil && dir != want {
		want = real
	}
	if dir != want {
		return fmt.Errorf("port %d answers for another cluster (%s), not ours (%s)", c.port, dir, want)
	}
	return nil
}

// stopWait is how long stopServer waits for a shutdown before the next, harder one.
var stopWait = 10 * time.Second

// stopServer stops the server and returns once none of its processes runs: a fast
// shutdown (SIGINT); after stopWait an immediate one (SIGQUIT: the postmaster tells its
// children to quit, and waits for them); after stopWait more, SIGKILL to the postmaster
// and to each of its children. Each child leads a process group of its own (PostgreSQL
// calls setsid in every child), so killing the postmaster's group kills the postmaster
// alone: its children ran on as orphans until each noticed the postmaster's death, and a
// standby's WAL receiver went on streaming, writing into the directory Close was removing
// ("directory not empty") and keeping its slot active on the primary (seen with the CPUs
// busy, where a standby's fast shutdown took over 10 s).
func (c *Cluster) stopServer() {
	if c.cmd == nil {
		return
	}
	defer func() { c.cmd = nil }()
	pid := c.cmd.Process.Pid
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGQUIT} {
		syscall.Kill(pid, sig)
		select {
		case <-c.exit:
			return
		case <-time.After(stopWait):
		}
	}
	kids := ChildrenOf(pid)
	syscall.Kill(pid, syscall.SIGKILL)
	for _, k := range kids {
		syscall.Kill(k, syscall.SIGKILL)
	}
	<-c.exit
	waitGone(kids)
}
