// Package pglocal runs a throwaway PostgreSQL cluster from the local server binaries
// (initdb + postgres): in a temporary directory ([TempRoot]: a tmpfs when there is one with
// room), on a free loopback port, with fsync off, as the postgres OS user when the caller
// is root, and tied to the calling process so that
// it dies with it: the postmaster gets a parent-death signal, and a watchdog shell that
// outlives the caller removes the directory once the caller is gone, however it ended.
//
// It is the part of the test harness (internal/pgtest) that the pgadvisory binary needs
// for its demo, kept apart so that the binary links no container code.
//
// # Which binaries
//
// When the environment variable ADVISORY_TEST_PGBIN ([EnvPGBin]) names a directory, the
// binaries come from there and nowhere else; it must hold initdb and postgres (and
// pg_basebackup for [Options.BaseBackupFrom]). Unset, they come from PATH, else the newest
// /usr/lib/postgresql/N/bin. See [FindBinaries].
package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
)

// EnvPGBin names the environment variable that points at a directory of PostgreSQL server
// binaries (see the package doc).
const EnvPGBin = "ADVISORY_TEST_PGBIN"

// Options shape a cluster. The zero value is a fresh cluster on 127.0.0.1 from the
// binaries [FindBinaries] finds.
type Options struct {
	// ListenAddresses are addresses to listen on besides 127.0.0.1 (they must exist).
	ListenAddresses []string
	// TrustCIDRs are client networks admitted without a password (pg_hba.conf). They
	// apply only to a cluster made by initdb.
	TrustCIDRs []string
	// Bin is the directory of server binaries. The default is what FindBinaries returns.
	Bin string
	// BaseBackupFrom, when set, is the connection string of a primary: the cluster is a
	// streaming hot standby of it (pg_basebackup -R) instead of a fresh initdb.
	BaseBackupFrom string
	// Settings are server settings, "name=value" each, given to postgres after the
	// harness's own (-c), so they override them (synchronous_commit=on does).
	Settings []string
	// Port is the port to try first; 0 picks a free one. If another server takes the port
	// before ours binds it, Start moves to another free port.
	Port int
}

// FindBinaries returns a directory holding initdb and postgres: the directory named by
// EnvPGBin if it is set (an error if it lacks them: a run for one PostgreSQL version must
// not silently use another), else the one of initdb in PATH, else the Debian layout
// /usr/lib/postgresql/N/bin, newest N first.
func FindBinaries() (string, error) {
	if dir := strings.TrimSpace(os.Getenv(EnvPGBin)); dir != "" {
		for _, name := range []string{"initdb", "postgres"} {
			if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
				return "", fmt.Errorf("%s=%s: %w", EnvPGBin, dir, err)
			}
		}
		return dir, nil
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil {
			p = real // a link in /usr/local/bin: the real directory has pg_basebackup too
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "postgres")); err == nil {
			return dir, nil
		}
	}
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	sort.Slice(dirs, func(i, j int) bool { return versionOf(dirs[i]) > versionOf(dirs[j]) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			return d, nil
		}
	}
	return "", errors.New("initdb not found in PATH or /usr/lib/postgresql/*/bin")
}

func versionOf(binDir string) int {
	v, _ := strconv.Atoi(filepath.Base(filepath.Dir(binDir)))
	return v
}

// Start makes a cluster as opts say and runs it. It blocks until the server accepts
// connections or ctx ends; ctx governs only the start-up. On error nothing is left
// running and the temporary directory is removed.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	c := &Cluster{opts: opts, bin: opts.Bin}
	if c.bin == "" {
		bin, err := FindBinaries()
		if err != nil {
			return nil, err
		}
		c.bin = bin
	}
	err := c.prepare()
	if err == nil && opts.BaseBackupFrom != "" {
		err = c.basebackup(ctx, opts.BaseBackupFrom)
	} else if err == nil {
		err = c.initdb(ctx)
	}
	for tries := 1; err == nil; tries++ {
		// A free port can be taken by another process between FreePort and the bind:
		// move on to another, a few times.
		if err = c.start(ctx); !errors.Is(err, errPortTaken) || tries == 5 {
			break
		}
		if c.port, err = FreePort(); err != nil {
			break
		}
	}
	if err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// prepare makes the temp dir under TempRoot (short path: the socket path is limited to 107
// bytes), picks a port, and arranges to run as the postgres user when we are root (initdb refuses root).
func (c *Cluster) prepare() error {
	dir, err := os.MkdirTemp(TempRoot(), "pgt")
	if err != nil {
		return err
	}
	c.dir = dir
	if c.dog, err = startWatchdog(dir); err != nil {
		return err
	}
	if c.cred, err = OwnDir(dir); err != nil {
		return err
	}
	if c.port = c.opts.Port; c.port != 0 {
		return nil
	}
	c.port, err = FreePort()
	return err
}

func (c *Cluster) command(ctx context.Context, name string, args ...string) *exec.Cmd {
	cmd := exec.CommandContext(ctx, filepath.Join(c.bin, name), args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Credential: c.cred}
	cmd.Dir = c.dir
	return cmd
}

func (c *Cluster) initdb(ctx context.Context) error {
	if err := c.initdbData(ctx, filepath.Join(c.dir, "data")); err != nil {
		return err
	}
	if len(c.opts.TrustCIDRs) == 0 {
		return nil
	}
	hba, err := os.OpenFile(filepath.Join(c.dir, "data", "pg_hba.conf"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	defer hba.Close()
	for _, cidr := range c.opts.TrustCIDRs {
		if _, err := fmt.Fprintf(hba, "host all all %s trust\n", cidr); err != nil {
			return err
		}
	}
	return nil
}

// basebackup copies the primary into dir/data as a standby, and reads the primary's
// settings that a hot standby may not set lower (see standbyFloors). The standby streams
// through a replication slot of its own on the primary (-C -S, and -R names it in
// primary_slot_name), which Close drops: without one, a primary that wrote WAL fast (other
// tests' CREATE DATABASE) and checkpointed (another base backup's) between the start of
// the copy and the start of its WAL stream had removed the segment the stream asked for
// ("requested WAL segment has already been removed"). The slot is made, reserving WAL,
// before the copy begins: pg_basebackup's own -C makes it only once the copy has begun.
func (c *Cluster) basebackup(ctx context.Context, primaryDSN string) error {
	c.dropSlot()
	slot := "pglocal_" + strings.ToLower(filepath.Base(c.dir))
	conn, err := pgx.Connect(ctx, primaryDSN)
	if err != nil {
		return fmt.Errorf("replication slot on the primary: %w", err)
	}
	_, err = conn.Exec(ctx, "SELECT pg_catalog.pg_create_physical_replication_slot($1, true)", slot)
	conn.Close(ctx)
	if err != nil {
		return fmt.Errorf("replication slot on the primary: %w", err)
	}
	c.slot, c.slotOn = slot, primaryDSN
	cmd := c.command(ctx, "pg_basebackup", "-D", filepath.Join(c.dir, "data"), "-R", "-X", "stream",
		"-S", slot, "-c", "fast", "--no-sync", "-d", primaryDSN)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("pg_basebackup: %w: %s", err, out)
	}
	floors, err := standbyFloors(ctx, primaryDSN)
	c.floors = floors
	return err
}

// dropSlot drops the replication slot a base backup made on the primary, if any (the
// server must be stopped: an active slot cannot be dropped). The primary's WAL sender
// notices the standby gone a moment after it stopped: the slot stays active until then,
// and dropSlot waits for it; a primary too busy to take the connection at once (a test
// that checkpoints in a loop beside base backups) is asked again. Both within 15 s, after
// which the slot left is an error. A primary that is gone (it refuses the connection)
// keeps the slot: that is only WAL kept on a server nobody uses.
func (c *Cluster) dropSlot() error {
	if c.slot == "" {
		return nil
	}
	slot, on := c.slot, c.slotOn
	c.slot, c.slotOn = "", ""
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	for {
		conn, err := pgx.Connect(ctx, on+" connect_timeout=5")
		switch {
		case err == nil:
			err = dropInactive(ctx, conn, slot)
			conn.Close(context.Background())
			return err
		case errors.Is(err, syscall.ECONNREFUSED):
			return nil
		case ctx.Err() != nil:
			return fmt.Errorf("replication slot %s left on the primary: %w", slot, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// dropInactive drops slot on conn once no WAL sender uses it; nil if it is gone already.
func dropInactive(ctx context.Context, conn *pgx.Conn, slot string) error {
	for {
		var active bool
		err := conn.QueryRow(ctx, "SELECT active FROM pg_catalog.pg_replication_slots WHERE slot_name = $1", slot).Scan(&active)
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			return nil
		case err != nil:
			return fmt.Errorf("replication slot %s left on the primary: %w", slot, err)
		case !active:
			if _, err = conn.Exec(ctx, "SELECT pg_catalog.pg_drop_replication_slot($1)", slot); err == nil {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("replication slot %s left on the primary (active %v): %w", slot, active, errors.Join(ctx.Err(), err))
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// standbyFloors returns the primary's values of the settings a hot standby refuses to
// recover with if its own are lower ("recovery aborted because of insufficient parameter
// settings"), as name → value. A primary not made by this package (a developer's server
// in ADVISORY_TEST_DSN, with max_connections raised for a benchmark) may exceed the
// values start passes.
func standbyFloors(ctx context.Context, primaryDSN string) (map[string]int, error) {
	conn, err := pgx.Connect(ctx, primaryDSN)
	if err != nil {
		return nil, fmt.Errorf("read the primary's settings: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, `SELECT name, setting::int FROM pg_settings WHERE name IN
		('max_connections', 'max_worker_processes', 'max_wal_senders',
		 'max_prepared_transactions', 'max_locks_per_transaction')`)
	if err != nil {
		return nil, fmt.Errorf("read the primary's settings: %w", err)
	}
	floors := map[string]int{}
	var name string
	var v int
	_, err = pgx.ForEachRow(rows, []any{&name, &v}, func() error { floors[name] = v; return nil })
	if err != nil {
		return nil, fmt.Errorf("read the primary's settings: %w", err)
	}
	return floors, nil
}
