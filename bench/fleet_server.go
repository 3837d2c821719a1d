package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory/internal/pglocal"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The fleet's server, and what the parent reads of it: its connections (pg_stat_activity),
// the CPU time of all its processes (/proc/PID/schedstat) and their memory (PSS, from
// /proc/PID/smaps_rollup: shared memory counted once, not once per backend as RSS would).

type fleetServer interface {
	DSN() string
	Close() error
}

// startFleetServer returns ADVISORY_TEST_DSN's server as it is, or a throwaway cluster
// from the local binaries whose max_connections admits conns client connections (the
// harness's 300 would be the first limit a fleet meets: see docs/benchmarks.md).
func startFleetServer(ctx context.Context, conns int) (fleetServer, string, error) {
	if dsn := strings.TrimSpace(os.Getenv(pgtest.EnvDSN)); dsn != "" {
		return nil, "", fmt.Errorf("-fleet needs a server it can start and read (/proc): unset %s", pgtest.EnvDSN)
	}
	set := []string{fmt.Sprintf("max_connections=%d", conns)}
	// An experiment's server settings (name=value, space-separated): they are named with
	// the server in the results.
	set = append(set, strings.Fields(os.Getenv("BENCH_FLEET_SERVER_SETTINGS"))...)
	c, err := pglocal.Start(ctx, pglocal.Options{Settings: set})
	if err != nil {
		return nil, "", err
	}
	return c, "local harness cluster (fsync off, shared_buffers 64MB), " + strings.Join(set, ", "), nil
}

// meteredServer is a throwaway fleet server (see startFleetServer), an admin connection to
// it and the meter of its processes. meter is nil where they cannot be read (meterErr
// says why): its methods then read nothing, and the server's CPU and memory come out 0.
type meteredServer struct {
	srv      fleetServer
	settings string // the server's description (startFleetServer)
	admin    *pgx.Conn
	meter    *serverMeter
	meterErr error
}

// startMetered starts a fleet server with room for conns client connections and connects
// to it. Close it when done.
func startMetered(ctx context.Context, conns int) (*meteredServer, error) {
	srv, settings, err := startFleetServer(ctx, conns)
	if err != nil {
		return nil, err
	}
	admin, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		srv.Close()
		return nil, err
	}
	ms := &meteredServer{srv: srv, settings: settings, admin: admin}
	ms.meter, ms.meterErr = newServerMeter(ctx, admin)
	return ms, nil
}

// Close closes the admin connection and stops the server.
func (ms *meteredServer) Close() {
	ms.admin.Close(context.Background())
	ms.srv.Close()
}

// serverMeter reads the server's processes: the postmaster and its children.
type serverMeter struct {
	postmaster int
}

func newServerMeter(ctx context.Context, admin *pgx.Conn) (*serverMeter, error) {
	pm, err := parentOf(int(admin.PgConn().PID()))
	if err != nil {
		return nil, err
	}
	return &serverMeter{postmaster: pm}, nil
}

func (sm *serverMeter) processes() []int {
	if sm == nil {
		return nil
	}
	kids, _ := childrenOf(sm.postmaster)
	return append(kids, sm.postmaster)
}

// cpu returns the CPU time all the server's processes have used so far. A backend that
// exits takes its time with it: the fleet's backends live through the timed window.
func (sm *serverMeter) cpu() time.Duration {
	var sum int64
	for _, pid := range sm.processes() {
		sum += runTime(pid)
	}
	return time.Duration(sum)
}

// memory returns the server's proportional set size in MB.
func (sm *serverMeter) memory() float64 {
	var kb int64
	for _, pid := range sm.processes() {
		kb += pssKB(pid)
	}
	return float64(kb) / 1024
}

func pssKB(pid int) int64 {
	f, err := os.Open(fmt.Sprintf("/proc/%d/smaps_rollup", pid))
	if err != nil {
		return 0
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if fs := strings.Fields(s.Text()); len(fs) >= 2 && fs[0] == "Pss:" {
			v, _ := strconv.ParseInt(fs[1], 10, 64)
			return v
		}
	}
	return 0
}

// connSamples are the client connections seen during a window.
type connSamples struct {
	peak       int
	meanActive float64
}

// sampleConns counts client backends (all, and those not idle) every 200 ms for d. The
// admin connection itself is not counted.
func (sm *serverMeter) sampleConns(ctx context.Context, admin *pgx.Conn, d time.Duration) connSamples {
	var cs connSamples
	var active, n int
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		var all, busy int
		err := admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state <> 'idle')
			FROM pg_stat_activity WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&all, &busy)
		if err != nil {
			continue
		}
		cs.peak, active, n = max(cs.peak, all), active+busy, n+1
	}
	if n > 0 {
		cs.meanActive = float64(active) / float64(n)
	}
	return cs
}

// machineLine names the machine a run measured: the same build and server measured
// 3,400 raw locks/s on one 2-CPU machine and 10,500 on another (stop 32), so a figure
// is read against its CPU model and kernel.
func machineLine() string {
	return fmt.Sprintf("%s/%s, %d CPUs (%s), kernel %s, %s", runtime.GOOS, runtime.GOARCH, runtime.NumCPU(),
		cpuModel(), kernelRelease(), runtime.Version())
}

// cpuModel returns /proc/cpuinfo's first model name, or "CPU model unknown".
func cpuModel() string {
	b, _ := os.ReadFile("/proc/cpuinfo")
	for _, line := range strings.Split(string(b), "\n") {
		if name, value, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(name) == "model name" {
			return strings.TrimSpace(value)
		}
	}
	return "CPU model unknown"
}

// kernelRelease returns uname's release, or "unknown".
func kernelRelease() string {
	b, err := os.ReadFile("/proc/sys/kernel/osrelease")
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(b))
}

// waitIdle waits (up to 30 s) until the replicas' backends have exited, so that the next
// point does not pay for this one's.
func (sm *serverMeter) waitIdle(ctx context.Context, admin *pgx.Conn) error {
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
			WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			time.Sleep(time.Second)
			return nil
		}
	}
	return fmt.Errorf("fleet: the replicas' backends did not exit within 30 s")
}
