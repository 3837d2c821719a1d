package main

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"time"
)

// The side-by-side fleet (-fleet-mix): two or more variants run as groups of replicas in
// one window against one server, each group on names of its own. Windows run one after
// another on this 2-CPU machine spread by 12-30 % in raw pgx's own locks/s, wider than the
// differences a change makes; variants that share a window share its drift, so their ratio
// holds still (raw against raw: 0.95x and 1.04x). Each group locks its own names (a
// prefix of its own: childSpec.Prefix), so that no group waits behind another's locks:
// with shared names under the hot-key skew, named locks against raw measured 0.55x, the
// server's queue order rather than the cost (0.70-0.75x on disjoint names). What is split
// per group is the replicas' own figures, locks/s and client CPU per lock; the server's
// CPU serves every group and is given for the whole window.

// mixGroup is one variant: an implementation, run by this binary or by another build of
// the bench (an earlier commit's, to compare builds).
type mixGroup struct {
	impl, bin string
}

func (g mixGroup) String() string {
	if g.bin == "" {
		return g.impl
	}
	return g.impl + "@" + g.bin
}

// parseMix reads -fleet-mix: groups separated by commas, each an implementation
// ("advisory", implKey, implNoNames or "raw"), optionally followed by @ and the path of
// another bench binary that runs it.
func parseMix(s string) ([]mixGroup, error) {
	var gs []mixGroup
	for _, part := range strings.Split(s, ",") {
		impl, bin, _ := strings.Cut(strings.TrimSpace(part), "@")
		switch impl {
		case "advisory", implKey, implNoNames, "raw":
		default:
			return nil, fmt.Errorf("-fleet-mix: %q is not an implementation (advisory, %q, %q or raw)", impl, implKey, implNoNames)
		}
		if bin != "" {
			if _, err := os.Stat(bin); err != nil {
				return nil, fmt.Errorf("-fleet-mix: %w", err)
			}
		}
		gs = append(gs, mixGroup{impl: impl, bin: bin})
	}
	if len(gs) < 2 {
		return nil, fmt.Errorf("-fleet-mix: %q names fewer than two groups", s)
	}
	return gs, nil
}

// mixConfig is what -fleet-mix's flags set, with the fleet's shape (fleetConfig).
type mixConfig struct {
	groups []mixGroup
	runs   int
	hot    bool
}

// mixRun is one window's figures, by group (in -fleet-mix's order).
type mixRun struct {
	locksPerSec, clientCPU []float64 // client CPU: µs per lock
	serverCPU              float64   // µs per lock, all groups together
}

// runFleetMix runs mc.runs windows, the groups' start order rotated from one to the next,
// and prints each window and each group's ratio to the first group: median and range.
func runFleetMix(ctx context.Context, cfg fleetConfig, mc mixConfig, self string, out io.Writer) error {
	per := cfg.procs / len(mc.groups)
	if per < 1 {
		return fmt.Errorf("-fleet-mix: %d replicas cannot be split between %d groups", cfg.procs, len(mc.groups))
	}
	ms, err := startMetered(ctx, per*len(mc.groups)*cfg.goroutines+50)
	if err != nil {
		return err
	}
	defer ms.Close()
	srv, settings, admin, sm := ms.srv, ms.settings, ms.admin, ms.meter
	if ms.meterErr != nil {
		fmt.Fprintf(out, "the server's processes cannot be read (%v): no server CPU\n", ms.meterErr)
	}
	skew := map[bool]string{false: "uniform", true: "hot 90/10"}[mc.hot]
	fmt.Fprintf(out, "fleet side by side: %d groups × %d replicas × %d goroutines (pools of %d) over %d names each, %s, "+
		"%v windows after %v untimed, %d runs, start order rotated; %s; %s; %s; load %s\n",
		len(mc.groups), per, cfg.goroutines, cfg.goroutines, cfg.names, skew, cfg.duration, cfg.warmup, mc.runs,
		settings, machineLine(), "unpinned", loadAverage())
	var runs []mixRun
	for r := range mc.runs {
		run, err := mixWindow(ctx, cfg, mc, per, r, self, srv.DSN(), sm)
		if err != nil {
			return err
		}
		if err := sm.waitIdle(ctx, admin); err != nil {
			return err
		}
		runs = append(runs, run)
		var parts []string
		for g, grp := range mc.groups {
			parts = append(parts, fmt.Sprintf("%s %.0f locks/s, client %.0f µs/lock, %.3fx", grp, run.locksPerSec[g],
				run.clientCPU[g], run.locksPerSec[g]/run.locksPerSec[0]))
		}
		fmt.Fprintf(out, "run %d: %s; server %.0f µs/lock (all groups); load %s\n", r+1, strings.Join(parts, "; "),
			run.serverCPU, loadAverage())
	}
	for g, grp := range mc.groups[1:] {
		var ratios, cpu []float64
		for _, run := range runs {
			ratios = append(ratios, run.locksPerSec[g+1]/run.locksPerSec[0])
			cpu = append(cpu, run.clientCPU[g+1]/run.clientCPU[0])
		}
		fmt.Fprintf(out, "%s / %s: locks/s %s; client CPU per lock %s\n", grp, mc.groups[0], spreadOver(ratios, "runs"),
			spreadOver(cpu, "runs"))
	}
	return nil
}

// mixWindow runs one window: every group's replicas started (in an order rotated by r),
// connected, then set going together.
func mixWindow(ctx context.Context, cfg fleetConfig, mc mixConfig, per, r int, self, dsn string, sm *serverMeter) (mixRun, error) {
	n := len(mc.groups)
	kids := make([][]*fleetKid, n)
	defer func() {
		for _, ks := range kids {
			for _, k := range ks {
				k.stop()
			}
		}
	}()
	for i := range n {
		g := (i + r) % n
		bin := cmp.Or(mc.groups[g].bin, self)
		for p := range per {
			spec := childSpec{Impl: mc.groups[g].impl, Goroutines: cfg.goroutines, Names: cfg.names, Hot: mc.hot,
				Conns: cfg.goroutines, Warmup: cfg.warmup, Duration: cfg.duration, Seed: uint64(g*per + p + 1),
				Prefix: fmt.Sprintf("mix%d", g)}
			k, err := startKid(bin, dsn, spec)
			if err != nil {
				return mixRun{}, err
			}
			kids[g] = append(kids[g], k)
		}
	}
	for _, ks := range kids {
		for _, k := range ks {
			if err := k.waitLine("READY"); err != nil {
				return mixRun{}, err
			}
		}
	}
	for i := range n {
		for _, k := range kids[(i+r)%n] {
			fmt.Fprintln(k.stdin, "GO")
		}
	}
	time.Sleep(cfg.warmup)
	cpu0 := sm.cpu() // 0 without a meter (see meteredServer)
	time.Sleep(cfg.duration)
	cpu1 := sm.cpu()
	run := mixRun{locksPerSec: make([]float64, n), clientCPU: make([]float64, n)}
	var all int64
	for g, ks := range kids {
		var locks int64
		var cpu time.Duration
		for _, k := range ks {
			res, err := k.result()
			if err != nil {
				return run, err
			}
			if res.FirstError != "" {
				return run, fmt.Errorf("%s: %s", mc.groups[g], res.FirstError)
			}
			locks, cpu = locks+res.Locks, cpu+res.CPU
		}
		if locks == 0 {
			return run, fmt.Errorf("%s took no lock", mc.groups[g])
		}
		run.locksPerSec[g] = float64(locks) / cfg.duration.Seconds()
		run.clientCPU[g] = float64(cpu.Microseconds()) / float64(locks)
		all += locks
	}
	run.serverCPU = float64((cpu1-cpu0)/time.Microsecond) / float64(all)
	return run, nil
}

// mixNotes is the side-by-side fleet's section of docs/benchmarks.md: figures of one run
// of -fleet-mix, typed from its output (it writes no results file).
const mixNotes = `## The fleet side by side (issue 24)

On this 2-CPU machine the headline's windows, run one after another, spread by 12–30 % in
raw pgx's own locks/s: wider than most differences between the implementations (the
rounds above). ` + "`cd bench && go run . -fleet-mix \"raw,advisory,advisory LockKey\"`" + `
(fleet_mix.go) runs them as groups of replicas in one window against one server, so that
they share its drift: the -fleet-procs replicas are split between the groups, each group
locks names of its own (a prefix per group, so that no group waits behind another's
locks), the groups' start order is rotated from one run to the next, and each run gives
every group's locks/s and client CPU per lock as a ratio to the first group's. The server's
CPU serves every group and is given for the whole window only. A group written
IMPL@PATH runs another build of the bench (an earlier commit's), which is how two builds
are compared. Raw against raw measured 0.95x and 1.04x.

One run, ` + "`-fleet-mix \"raw,advisory,advisory LockKey,advisory WithoutNamesInActivity\" -fleet-procs 20`" + `:
4 groups × 5 replicas × 50 goroutines (pools of 50) over 1,000 names each, 20 s windows
after 5 s untimed, 4 runs per workload; linux/amd64, 2 CPUs (AMD EPYC), kernel 6.18,
go1.26.8, unpinned, PostgreSQL 15 (local harness cluster, fsync off). Locks/s as the
median ratio to raw's (range over the 4 runs), then client CPU per lock:

| workload | named | LockKey | named, WithoutNamesInActivity | named, client CPU | LockKey, client CPU | WithoutNamesInActivity, client CPU |
|---|---|---|---|---|---|---|
| uniform | 0.85x (0.71x–0.89x) | 0.93x (0.93x–1.03x) | 0.93x (0.82x–1.08x) | 1.18x | 1.04x | 1.04x |
| hot 90/10 | 0.83x (0.83x–0.93x) | 0.90x (0.84x–0.97x) | 0.89x (0.88x–1.01x) | 1.18x | 1.08x | 1.08x |

A second run right after, 3 groups × 7 replicas (raw, named, WithoutNamesInActivity): named
0.79x uniform (0.77x–0.83x) and 0.81x hot (0.81x–0.87x), the option 0.94x (0.93x–1.00x)
and 0.89x (0.85x–0.97x); client CPU per lock 1.22x, 1.23x, 1.05x and 1.10x raw's. An
earlier run, 3 groups × 7 replicas (raw, named, LockKey), gave named 0.81x uniform and
0.90x hot, LockKey 0.97x and 0.94x, client CPU 1.17x, 1.18x, 1.02x and 1.07x.

- **By key, the library costs what raw pgx does.** ` + "`LockKey`" + `'s client CPU per lock is
  1.02x to 1.08x raw's (the pin, the key's gate, the pool's liveness peek and the loss
  watcher's armer, each a guarantee), and its locks/s 0.90x to 0.97x.
- **Names kept in the process cost nothing more.** A Manager made
  ` + "`WithoutNamesInActivity`" + ` locks by name and sends ` + "`LockKey`" + `'s statements: the
  same locks/s and client CPU as ` + "`LockKey`" + `, and the names stay in ` + "`Lock.Name`" + `,
  hooks, logs and errors. What it gives up is the name in pg_stat_activity for sessions
  looking from outside (docs/keys.md).
- **A name costs the parse, and more where locks are contended.** A named lock's
  statement is a text of its own per name, parsed by the server unless its connection has
  prepared it (the statements probe below). With 7 replicas per group, uniform, few locks
  are found taken, and the try by key first stays (pin_named.go): measured against a build
  that always skipped it, the Manager's choice took 1.05x its locks/s (0.95x the other way
  round, 0.93x–0.99x over 4 runs). With the hot-key skew most locks are found taken and
  the named statement is sent at once: 0.83x to 0.90x raw.
- **The parse is not all of it.** Sending a lock found taken by key, with the name's
  comment after the grant (the server then parses no named statement, and a waiter would
  show no name), measured no better against this build, side by side (7 replicas each, 4
  runs): 0.86x raw uniform against 0.88x, 0.82x hot against 0.84x. Profiled (10 replicas
  named beside 10 by key, uniform, 20 s), a named lock cost the client 72 µs of CPU
  against 59.5 µs by key: the named statement by the simple protocol and its reading
  (+5.5 µs), the pin's statement texts and the connection's count of a name's uses
  (+3.5 µs), the give-back (+2.3 µs). Each is a few microseconds, spent for the name.
`
