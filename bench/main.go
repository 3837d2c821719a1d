// Command bench measures advisory beside the physical floor and its peers, in one run,
// and writes the results: docs/benchmarks.json, docs/benchmarks.md, the PNG plots and the
// README's figures block, all from the same samples.
//
//	cd bench && go run .            # about 7 minutes; -peers=false: about 1 minute
//
// The sub-millisecond rows are measured in every placement of client and server on the
// CPUs (unpinned, one core, two cores: see placements), interleaved; moving the server's
// processes needs root (or CAP_SYS_NICE), else only the unpinned rows are measured.
// It starts a throwaway PostgreSQL with the test harness (ADVISORY_TEST_DSN, testcontainers,
// or the local binaries), so it needs nothing else. Every row is measured a few times in
// each round, and rounds interleave all rows, so that machine drift hits every row alike;
// each ratio divides medians measured in the same run.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/signal"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// roleEnv makes the bench binary a holder process for the SIGKILL and crash rows.
const roleEnv = "ADVISORY_BENCH_ROLE"

func main() {
	switch os.Getenv(roleEnv) {
	case "fleet":
		os.Exit(runFleetChild())
	case "probe":
		os.Exit(runProbeRole())
	case "sharedidle":
		os.Exit(runIdleChild())
	}
	if role := os.Getenv(roleEnv); role != "" {
		os.Exit(runRole(role))
	}
	rounds := flag.Int("rounds", 5, "interleaved rounds (at least 5 for the report)")
	docs := flag.String("docs", "../docs", "directory for benchmarks.md, benchmarks.json and the plots")
	readme := flag.String("readme", "../README.md", "README whose figures block is rewritten (\"\": none)")
	peers := flag.Bool("peers", true, "also measure the peers (goose, lease tables): about 5 more minutes")
	pls := flag.String("placements", "", "comma-separated placements to measure (default all: unpinned, one core, two cores)")
	only := flag.String("only", "", "measure only the rows whose name matches this regular expression (and their floors)")
	featuresOnly := flag.Bool("features", false, "measure only the feature benchmarks (features.go), store them in -docs's benchmarks.json and render")
	render := flag.Bool("render", false, "measure nothing: write benchmarks.md, the plots and the README block from -docs's benchmarks.json")
	var pc probeConfig
	probe := flag.Bool("probe", false, "run only the cycle probe (probe.go): the outside harness of issue 24, printed, nothing written")
	flag.IntVar(&pc.samples, "probe-samples", 3000, "cycle probe: timed samples per row")
	flag.IntVar(&pc.warmups, "probe-warmups", 200, "cycle probe: untimed rounds first")
	flag.BoolVar(&pc.variants, "probe-variants", false, "cycle probe: also time the floor's variants")
	flag.BoolVar(&pc.shuffle, "probe-shuffle", false, "cycle probe: shuffle the row order every round")
	flag.StringVar(&pc.profile, "probe-cpuprofile", "", "cycle probe: write a CPU profile of the timed rounds to this file")
	flag.StringVar(&pc.only, "probe-only", "", "cycle probe: time only the floor and the row of this name")
	flag.BoolVar(&pc.histogram, "probe-histogram", false, "cycle probe: print each row's spread in 10 µs buckets")
	flag.BoolVar(&pc.warm, "probe-warm", false, "cycle probe: time each sample after an untimed run of its row")
	flag.StringVar(&pc.placement, "probe-placement", "", "cycle probe: \"one core\" or \"two cores\" (default unpinned)")
	flag.BoolVar(&pc.cpu, "probe-cpu", false, "cycle probe: measure CPU time per cycle (client threads, backend) instead of latency")
	flag.BoolVar(&pc.oneManager, "probe-one-manager", false, "cycle probe: run Lock and TryLock on one Manager, as the issue's harness did (else a Manager each)")
	flag.IntVar(&pc.draws, "probe-draws", 1, "cycle probe: split the samples between this many draws, each on new connections and Managers (new backends)")
	fc := fleetConfig{}
	fleet := flag.Bool("fleet", false, "run only the fleet benchmark (fleet.go): writes -docs's benchmarks-fleet.json, its plots and benchmarks.md")
	flag.IntVar(&fc.procs, "fleet-procs", 20, "fleet: replica processes")
	flag.IntVar(&fc.goroutines, "fleet-goroutines", 50, "fleet: goroutines per replica (and its pool size)")
	flag.IntVar(&fc.names, "fleet-names", 1000, "fleet: lock names")
	flag.DurationVar(&fc.duration, "fleet-duration", 60*time.Second, "fleet: timed window of each headline point")
	flag.DurationVar(&fc.warmup, "fleet-warmup", 10*time.Second, "fleet: untimed run before each window")
	flag.BoolVar(&fc.sweep, "fleet-sweep", true, "fleet: also the scaling sweep (processes, goroutines, names)")
	flag.DurationVar(&fc.sweepDuration, "fleet-sweep-duration", 10*time.Second, "fleet: timed window of each sweep point")
	flag.BoolVar(&fc.conns, "fleet-conns", true, "fleet: also the connections question (pool sizes with work under the lock)")
	flag.DurationVar(&fc.hold, "fleet-hold", 2*time.Millisecond, "fleet: the connections question's work under the lock")
	flag.IntVar(&fc.rounds, "fleet-rounds", 3, "fleet: rounds of the headline (each runs every headline point once, interleaved)")
	flag.Float64Var(&fc.rate, "fleet-rate", 1200, "fleet: the cost question's offered locks/s for the whole fleet (0: skip it)")
	mix := flag.String("fleet-mix", "", "run only the side-by-side fleet (fleet_mix.go): comma-separated groups "+
		"(advisory, \"advisory LockKey\", \"advisory WithoutNamesInActivity\", raw; IMPL@PATH runs it with another bench build), -fleet-procs split "+
		"between them, in one window per run, printed")
	mc := mixConfig{}
	flag.IntVar(&mc.runs, "fleet-mix-runs", 4, "side-by-side fleet: windows, the groups' start order rotated")
	flag.BoolVar(&mc.hot, "fleet-mix-hot", false, "side-by-side fleet: the hot-key skew (else uniform)")
	shc := sharedConfig{}
	sharedFleet := flag.Bool("shared", false, "run only issue 38's fleet (shared.go): raw, advisory and advisory WithSharedSessions "+
		"with -fleet-hold of work under each lock; printed, and written to -docs's benchmarks-shared.json")
	flag.IntVar(&shc.rounds, "shared-rounds", 2, "shared fleet: rounds, the order rotated")
	flag.StringVar(&shc.impls, "shared-impls", "", "shared fleet: the implementations beside raw, comma-separated (default: all)")
	flag.StringVar(&shc.skews, "shared-skews", "uniform,hot", "shared fleet: the skews to run (uniform, hot)")
	flag.IntVar(&sharedRawConns, "shared-raw-conns", sharedRawConns, "shared fleet: the connection budget per replica: the pool of \""+implRawBudget+"\", \""+implBudget+"\" and \""+implBudgetNoNames+"\"")
	flag.IntVar(&sharedWaits, "shared-waits", sharedWaits, "shared fleet: \""+implParked+"\"'s WithWaitSessions bound per replica")
	flag.DurationVar(&shc.duration, "shared-duration", 20*time.Second, "shared fleet: timed window of each point")
	ic := idleConfig{}
	idle := flag.Bool("shared-idle", false, "run only issue 38's idle holdings (shared_idle.go): processes × locks held at once; printed, "+
		"and written to -docs's benchmarks-shared.json")
	flag.IntVar(&ic.procs, "idle-procs", 100, "idle holdings: processes")
	flag.IntVar(&ic.locks, "idle-locks", 100, "idle holdings: locks each process holds at once")
	flag.StringVar(&ic.impl, "idle-impl", implShared, "idle holdings: advisory or \""+implShared+"\"")
	sc := stmtConfig{}
	statements := flag.Bool("statements", false, "run only the statements probe (statements.go): a lock's statement at fleet scale, printed")
	flag.IntVar(&sc.reps, "statements-reps", 5, "statements probe: windows per mode and phase, interleaved")
	flag.DurationVar(&sc.window, "statements-window", 8*time.Second, "statements probe: each window")
	flag.Float64Var(&sc.rate, "statements-rate", 1000, "statements probe: the paced phase's locks/s in all")
	pcfg := pooledConfig{}
	pooled := flag.Bool("pooled", false, "run only the transaction-holding cycle through a real PgBouncer (pooled.go) against raw's "+
		"2-round-trip floor, in every placement, printed")
	flag.IntVar(&pcfg.rounds, "pooled-rounds", 10, "pooled cycle: rounds (each opens every connection afresh)")
	flag.IntVar(&pcfg.cycles, "pooled-cycles", 1000, "pooled cycle: timed cycles per row, round and placement")
	flag.IntVar(&pcfg.warmups, "pooled-warmups", 100, "pooled cycle: untimed cycles per row before (and again after placing)")
	flag.BoolVar(&pcfg.variants, "pooled-variants", false, "pooled cycle: also the 3-round-trip floor and raw carrying the settings")
	flag.StringVar(&pcfg.placements, "pooled-placements", "", "pooled cycle: placements (default all: unpinned, one core, two cores)")
	flag.StringVar(&pcfg.profile, "pooled-cpuprofile", "", "pooled cycle: write a CPU profile of the client to this file")
	flag.Parse()
	if *pooled {
		if err := runPooled(context.Background(), pcfg, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *statements {
		sc.conns, sc.names = fc.procs*fc.goroutines, fc.names
		if err := runStatements(context.Background(), sc, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *sharedFleet || *idle {
		fc.docs, ic.docs = *docs, *docs
		self, err := os.Executable()
		if err == nil && *sharedFleet {
			err = runSharedFleet(context.Background(), fc, shc, self, os.Stdout)
		}
		if err == nil && *idle {
			err = runIdle(context.Background(), ic, self, os.Stdout)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *mix != "" {
		self, err := os.Executable()
		if err == nil {
			mc.groups, err = parseMix(*mix)
		}
		if err == nil {
			err = runFleetMix(context.Background(), fc, mc, self, os.Stdout)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *fleet {
		fc.docs = *docs
		self, err := os.Executable()
		if err == nil {
			err = runFleet(context.Background(), fc, self, os.Stderr)
		}
		if err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *probe {
		if err := runProbe(context.Background(), pc, os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *featuresOnly {
		if err := refreshFeatures(*docs, *readme); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	if *render {
		if err := renderFrom(*docs, *readme); err != nil {
			fmt.Fprintln(os.Stderr, "bench:", err)
			os.Exit(1)
		}
		return
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	filter, err := regexp.Compile(*only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "bench: -only:", err)
		os.Exit(64)
	}
	if err := run(ctx, *rounds, *docs, *readme, *peers, filter, *pls); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, rounds int, docs, readme string, peers bool, only *regexp.Regexp, pls string) error {
	start, load := time.Now(), loadAverage()
	srv, err := pgtest.Start(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	b, err := newBench(ctx, srv.DSN(), pls)
	if err != nil {
		return err
	}
	defer b.close()
	rows := selectRows(b.rows(peers), only)
	// Phase one: the unpinned sub-millisecond rows, in every round, before anything is
	// pinned. Threads that a pinned pass moved stay where it left them after being let go
	// (the scheduler seldom moves a thread that keeps running), so unpinned rows timed
	// after pinned passes measured the last placement's leftovers, not what a user's
	// program sees (issue 24: the floor read 0.120 ms beside a fresh process's 0.099-0.110).
	// The cycles are measured over many draws of their backends (see bench.redraw).
	free, rest := splitUnpinned(rows)
	for r := 1; r <= rounds; r++ {
		for d := 0; d < cycleDraws; d++ {
			if r > 1 || d > 0 {
				if err := b.redraw(ctx); err != nil {
					return err
				}
			}
			if err := warmUp(ctx, b, phase(free, true)); err != nil {
				return err
			}
			if err := measureRound(ctx, b, phase(free, true), false); err != nil {
				return err
			}
			endDraw(phase(free, true))
		}
		if err := measureRound(ctx, b, phase(free, false), true); err != nil { // the handoffs
			return err
		}
		if err := countRound(b, phase(free, true)); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "unpinned rows done (%v)\n", time.Since(start).Round(time.Second))
	for r := 1; r <= rounds; r++ {
		// Then two phases: the pinned sub-millisecond rows together, then the heavy ones
		// (processes, new connections, 10,000-lock statements), which would disturb the former.
		for _, light := range []bool{true, false} {
			if err := measureRound(ctx, b, phase(rest, light), !light); err != nil {
				return err
			}
			if light {
				if err := countRound(b, phase(rest, true)); err != nil {
					return err
				}
			}
		}
		fmt.Fprintf(os.Stderr, "round %d/%d done (%v)\n", r, rounds, time.Since(start).Round(time.Second))
	}
	b.placer.place(placement{Name: "unpinned"})
	probe, probeDraws, err := b.outsideProbe()
	if err != nil {
		return err
	}
	var features []feature
	if only.String() == "" { // a partial run (-only) is for a quick look: no feature benchmarks
		if features, err = runFeatures(".."); err != nil {
			return err
		}
	}
	res := results{Machine: machine(srv), Load: load + " → " + loadAverage(), Rounds: rounds, Took: time.Since(start).Round(time.Second).String(), Rows: summarize(rows), Probe: probe, ProbeDraws: probeDraws, Features: features, FeaturesLoad: loadAverage()}
	if err := res.writeJSON(filepath.Join(docs, "benchmarks.json")); err != nil {
		return err
	}
	return res.render(docs, readme)
}

// render writes everything that is derived from the results: the plots,
// benchmarks.md and the README's block.
func (res results) render(docs, readme string) error {
	if err := res.plot(docs); err != nil {
		return err
	}
	if fr, ok := loadFleet(docs); ok {
		if err := fr.plot(docs); err != nil {
			return err
		}
	}
	if err := res.writeMarkdown(filepath.Join(docs, "benchmarks.md")); err != nil {
		return err
	}
	if readme == "" {
		return nil
	}
	return res.writeReadme(readme)
}

// renderFrom renders a run's stored results again (after a change to the report's form).
func renderFrom(docs, readme string) error {
	res, err := loadResults(docs)
	if err != nil {
		return err
	}
	return res.render(docs, readme)
}

// loadResults reads a run's stored results.
func loadResults(docs string) (results, error) {
	var res results
	b, err := os.ReadFile(filepath.Join(docs, "benchmarks.json"))
	if err != nil {
		return res, err
	}
	return res, json.Unmarshal(b, &res)
}

func machine(srv *pgtest.Server) string {
	return fmt.Sprintf("%s/%s, %d CPUs, %s; PostgreSQL from the %s harness on loopback",
		runtime.GOOS, runtime.GOARCH, runtime.NumCPU(), runtime.Version(), srv.Kind())
}

// measureRound takes each row's samples for one round, interleaved: every pass takes one
// sample of every row still owed one, so neighbouring rows see the same machine state.
// With settle (the heavy rows), each sample waits 50 ms for the machine to quiet down
// first. The sub-millisecond rows are timed back to back in a shuffled order, as a
// program that takes locks among other statements meets them: a row is timed on a
// backend that has just served another row about as often as every other row. (Until
// issue 24 each timed sample followed an untimed run of its own row; no program runs
// each statement twice.) The first sample after threads moved is not kept.
func measureRound(ctx context.Context, b *bench, rows []*row, settle bool) error {
	most := 0
	for _, r := range rows {
		most = max(most, r.per)
	}
	for i := 0; i < most; i++ {
		for _, r := range passOrder(b, rows, i) {
			if i >= r.per {
				continue
			}
			moved, err := b.moveFor(r)
			if err != nil {
				return err
			}
			if settle {
				// Let the previous heavy sample's aftermath (a killed process, backends
				// exiting) pass, so it does not land on this one.
				time.Sleep(50 * time.Millisecond)
			} else if moved {
				if _, err := r.sample(ctx, b); err != nil { // the first after a move: untimed
					return fmt.Errorf("%s: %w", r.Name, err)
				}
			}
			v, err := r.sample(ctx, b)
			if err != nil {
				return fmt.Errorf("%s: %w", r.Name, err)
			}
			r.values = append(r.values, v)
		}
	}
	return nil
}

// warmUp runs 200 untimed passes over rows (connections set up, statements prepared,
// caches warm), as the outside harness of issue 24 did before timing.
func warmUp(ctx context.Context, b *bench, rows []*row) error {
	for i := 0; i < 200; i++ {
		for _, r := range rows {
			if _, err := r.sample(ctx, b); err != nil {
				return fmt.Errorf("%s: %w", r.Name, err)
			}
		}
	}
	return nil
}

// splitUnpinned returns the placed rows measured unpinned, and the others.
func splitUnpinned(rows []*row) (free, rest []*row) {
	for _, r := range rows {
		if r.Placement == "unpinned" {
			free = append(free, r)
		} else {
			rest = append(rest, r)
		}
	}
	return free, rest
}

// passOrder returns the rows in pass i's order: grouped by placement (so threads move
// only a few times a pass), groups in turn first, rows shuffled within each group.
func passOrder(b *bench, rows []*row, i int) []*row {
	var names []string
	groups := map[string][]*row{}
	for _, r := range rows {
		n := b.placementOf(r).Name
		if groups[n] == nil {
			names = append(names, n)
		}
		groups[n] = append(groups[n], r)
	}
	var out []*row
	for j := range names {
		g := groups[names[(i+j)%len(names)]]
		for _, k := range rand.Perm(len(g)) {
			out = append(out, g[k])
		}
	}
	return out
}

// moveFor places the client and server for r, and reports whether they moved.
func (b *bench) moveFor(r *row) (bool, error) {
	if b.placer == nil {
		return false, nil
	}
	pl := b.placementOf(r)
	if b.placer.current == pl.Name {
		return false, nil
	}
	return true, b.placer.place(pl)
}

// selectRows keeps the rows matching only, and the floors they are compared with.
func selectRows(rows []*row, only *regexp.Regexp) []*row {
	keep := map[string]bool{}
	for _, r := range rows {
		if only.MatchString(r.Name) {
			keep[r.Name], keep[r.Floor], keep[r.Floor2] = true, true, true
		}
	}
	var out []*row
	for _, r := range rows {
		if keep[r.Name] {
			out = append(out, r)
		}
	}
	return out
}

// phase returns the rows sampled many times a round (light: sub-millisecond work) or the
// others.
func phase(rows []*row, light bool) []*row {
	var out []*row
	for _, r := range rows {
		if (r.per >= 100) == light {
			out = append(out, r)
		}
	}
	return out
}

// loadAverage returns the first three fields of /proc/loadavg, or "unknown".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}
