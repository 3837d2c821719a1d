package pgtest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// Standby is a streaming hot standby of a Server, run from the local binaries like a local
// cluster (as the postgres OS user when we are root, temp dir, free loopback port).
type Standby struct {
	srv        *Server
	primaryDSN string
}

// StartStandby makes a hot standby of primary: pg_basebackup -R (WAL streamed during the
// copy, standby.signal and primary_conninfo written) into a temp dir, then postgres on a
// free port. It streams through a replication slot of its own on the primary, made before
// the copy and dropped by Close, so it may be made while other tests write WAL fast. The primary must allow replication connections from 127.0.0.1 for its DSN's
// user (a local cluster of this package does: wal_level=replica, max_wal_senders=20, and
// initdb's trust line for replication). It blocks until the standby accepts connections or
// ctx ends. Without pg_basebackup, or with binaries of another major version than the
// primary's, it returns an error wrapping [ErrUnavailable]. On error nothing is left.
func StartStandby(ctx context.Context, primary *Server) (*Standby, error) {
	bin, err := pglocal.FindBinaries()
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if err := checkStandbyTools(ctx, bin, primary.DSN()); err != nil {
		return nil, err
	}
	c, err := pglocal.Start(ctx, pglocal.Options{Bin: bin, BaseBackupFrom: primary.DSN()})
	if err != nil {
		return nil, err
	}
	return &Standby{srv: localServer(c, "standby"), primaryDSN: primary.DSN()}, nil
}

// checkStandbyTools makes sure bin has a pg_basebackup and the major version of the
// primary at primaryDSN.
func checkStandbyTools(ctx context.Context, bin, primaryDSN string) error {
	if _, err := os.Stat(filepath.Join(bin, "pg_basebackup")); err != nil {
		return fmt.Errorf("%w: no pg_basebackup in %s", ErrUnavailable, bin)
	}
	out, err := exec.CommandContext(ctx, filepath.Join(bin, "postgres"), "--version").Output()
	if err != nil {
		return fmt.Errorf("pgtest: %s/postgres --version: %w", bin, err)
	}
	binMajor, _ := leadingNumber(strings.TrimPrefix(strings.TrimSpace(string(out)), "postgres (PostgreSQL) "))
	var num int
	if err := queryRow(ctx, primaryDSN, "SELECT current_setting('server_version_num')::int", &num); err != nil {
		return fmt.Errorf("pgtest: primary's version: %w", err)
	}
	if binMajor != num/10000 {
		return fmt.Errorf("%w: a standby of PostgreSQL %d needs its binaries; %s has %d",
			ErrUnavailable, num/10000, bin, binMajor)
	}
	return nil
}

func leadingNumber(s string) (int, error) {
	end := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if end < 0 {
		end = len(s)
	}
	return strconv.Atoi(s[:end])
}

// Server returns the standby as a Server (DSN, Port, Restart, Close).
func (s *Standby) Server() *Server { return s.srv }

// DSN returns a connection string for the standby's superuser over TCP.
func (s *Standby) DSN() string { return s.srv.DSN() }

// Close stops the standby and removes its files.
func (s *Standby) Close() error { return s.srv.Close() }

// CatchUp blocks until the standby has replayed all the WAL the primary had written when
// CatchUp was called, bounded by 30 s and ctx.
func (s *Standby) CatchUp(ctx context.Context) error {
	// The insert position, not pg_current_wal_lsn() (the write position): with
	// synchronous_commit=off, as the harness runs, a commit can still be in WAL buffers.
	var target string
	if err := queryRow(ctx, s.primaryDSN, "SELECT pg_current_wal_insert_lsn()::text", &target); err != nil {
		return fmt.Errorf("pgtest: primary's WAL position: %w", err)
	}
	return poll(ctx, 30*time.Second, func() (bool, error) {
		var done bool
		err := queryRow(ctx, s.DSN(), "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", &done, target)
		return done, err
	})
}

// Promote ends recovery (pg_promote) and blocks until the standby is a primary
// (pg_is_in_recovery() is false), bounded by 60 s and ctx.
func (s *Standby) Promote(ctx context.Context) error {
	var ok bool
	// pg_promote waits up to its own 60 s: the query may take that long (a loaded machine
	// took more than queryRow's 10 s), and no more.
	if err := queryRowWithin(ctx, 65*time.Second, s.DSN(), "SELECT pg_promote(true, 60)", &ok); err != nil {
		return fmt.Errorf("pgtest: pg_promote: %w", err)
	}
	if !ok {
		return fmt.Errorf("pgtest: pg_promote did not finish within 60s")
	}
	return poll(ctx, 60*time.Second, func() (bool, error) {
		var inRecovery bool
		err := queryRow(ctx, s.DSN(), "SELECT pg_is_in_recovery()", &inRecovery)
		return !inRecovery, err
	})
}

// queryRow runs one query on a fresh connection and scans its single row into dst,
// within 10 s.
func queryRow(ctx context.Context, dsn, sql string, dst any, args ...any) error {
	return queryRowWithin(ctx, 10*time.Second, dsn, sql, dst, args...)
}

// queryRowWithin is queryRow within limit.
func queryRowWithin(ctx context.Context, limit time.Duration, dsn, sql string, dst any, args ...any) error {
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	return conn.QueryRow(ctx, sql, args...).Scan(dst)
}

// poll calls done every 20 ms until it reports true, it fails, ctx ends or limit passes.
func poll(ctx context.Context, limit time.Duration, done func() (bool, error)) error {
	deadline := time.Now().Add(limit)
	for {
		ok, err := done()
		if err != nil || ok {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("pgtest: not done after %v", limit)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}
