package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot/plotter"
)

// The fleet's section of docs/benchmarks.md, from docs/benchmarks-fleet.json.

// loadFleet reads the fleet's results, if a fleet run wrote them.
func loadFleet(docs string) (fleetResults, bool) {
	var fr fleetResults
	b, err := os.ReadFile(filepath.Join(docs, "benchmarks-fleet.json"))
	if err != nil || json.Unmarshal(b, &fr) != nil || len(fr.Main) == 0 {
		return fr, false
	}
	return fr, true
}

// base is the headline shape: the sweep varies one of its dimensions at a time.
func (fr fleetResults) base() fleetPoint { return fr.Main[0] }

// headline returns one point per workload and implementation, in the headline's order:
// of its rounds, the one with the median locks/s (the lower middle of an even count),
// a point measured as it is rather than averages of several.
func (fr fleetResults) headline() []fleetPoint {
	var order []string
	byRow := map[string][]fleetPoint{}
	for _, p := range fr.Main {
		k := p.Skew + "/" + p.Impl
		if byRow[k] == nil {
			order = append(order, k)
		}
		byRow[k] = append(byRow[k], p)
	}
	out := make([]fleetPoint, 0, len(order))
	for _, k := range order {
		pts := byRow[k]
		sort.SliceStable(pts, func(i, j int) bool { return pts[i].LocksPerSec < pts[j].LocksPerSec })
		out = append(out, pts[(len(pts)-1)/2])
	}
	return out
}

// rounds returns how many rounds the headline ran.
func (fr fleetResults) rounds() int {
	n := 0
	for _, p := range fr.Main {
		n = max(n, p.Round+1)
	}
	return n
}

// sweepSeries returns, per implementation, get against the swept dimension dim, the
// other dimensions at the headline's (uniform, one connection per goroutine; for "conns"
// hot 90/10), the headline's own point included.
func (fr fleetResults) sweepSeries(dim string, get func(fleetPoint) float64) map[string]plotter.XYs {
	b := fr.base()
	out := map[string]plotter.XYs{}
	for _, p := range append(fr.headline(), fr.Sweep...) {
		var x float64
		ok := p.Skew == "uniform" && p.Conns == p.Goroutines
		switch dim {
		case "procs":
			x, ok = float64(p.Procs), ok && p.Goroutines == b.Goroutines && p.Names == b.Names
		case "goroutines":
			x, ok = float64(p.Goroutines), ok && p.Procs == b.Procs && p.Names == b.Names
		case "names":
			x, ok = float64(p.Names), ok && p.Procs == b.Procs && p.Goroutines == b.Goroutines
		case "conns":
			x, ok = float64(p.Conns), p.Skew != "uniform" && p.Procs == b.Procs && p.Goroutines == b.Goroutines && p.Names == b.Names
		}
		if ok && p.Locks > 0 {
			out[p.Impl] = append(out[p.Impl], plotter.XY{X: x, Y: get(p)})
		}
	}
	for _, xys := range out {
		sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
	}
	if len(out["advisory"]) < 2 {
		return nil
	}
	return out
}

// fleetCommand is the command that writes the fleet's figures.
const fleetCommand = "cd bench && go run . -fleet"

func (fr fleetResults) markdown(b *strings.Builder) {
	bp := fr.base()
	fmt.Fprintf(b, "## Fleet: %d replicas × %d goroutines over %d names\n\n", bp.Procs, bp.Goroutines, bp.Names)
	fmt.Fprintf(b, "Written by `%s` (alone: it loads every CPU for minutes). Each replica is a child "+
		"process of the bench binary; every goroutine loops: pick a name, take the lock (blocking), release it at once. "+
		"**advisory**: `Manager.Lock` + `Unlock`, one Manager per replica with `pool_max_conns` = its goroutines; "+
		"**advisory LockKey**: `Manager.LockKey(KeyOf(name))`, the same locks without the name in the statement text; "+
		"**raw**: the same names' keys with `pg_advisory_lock($1)` + `pg_advisory_unlock($1)` on a pgxpool connection, "+
		"pool of the same size. Hot 90/10: 90 %% of calls go to the first 10 %% of the names. Acquire latency runs from "+
		"the call to holding the lock (pool wait included). Each replica opens all its connections before the window, "+
		"and one untimed point primes a freshly started server before the first (the first point after a start "+
		"ran at 0.68x and 0.86x of the same point's later rounds); "+
		"after %s untimed (the first five seconds after a start run at about 70 %% of the rate that follows: "+
		"benchmarks-fleet.json keeps each point's locks in every second from the start, `per_second`), the window "+
		"lasts %.0f s. Unpinned (the scheduler places every process). Server CPU is "+
		"the run time of every server process over the window (/proc schedstat): it includes PostgreSQL's own work "+
		"for sessions waiting on a lock (wake-ups; past deadlock_timeout, the deadlock check), which grows with "+
		"how many wait there. Server memory is the PSS of every server process at the end of the window, minus "+
		"the same before the replicas connected; \"not idle\" samples pg_stat_activity every 200 ms (0 where no "+
		"sample came back). "+
		"Machine: %s; server: %s. Load average at start → end: %s; run took %s.\n\n",
		fleetCommand, fr.Warmup, bp.Seconds, fr.Machine, fr.Settings, fr.Load, fr.Took)
	for _, note := range []string{fr.Note, fr.carriedNote()} {
		if note != "" {
			fmt.Fprintf(b, "%s\n\n", note)
		}
	}
	b.WriteString("| workload | | locks/s | p50 | p99 | connections open | not idle (mean) | server memory added (PSS) | client CPU per lock | server CPU per lock |\n" +
		"|---|---|---|---|---|---|---|---|---|---|\n")
	head := fr.headline()
	for _, skew := range []string{"uniform", "hot 90/10"} {
		pts := map[string]*fleetPoint{}
		for i := range head {
			if p := &head[i]; p.Skew == skew {
				pts[p.Impl] = p
			}
		}
		raw := pts["raw"]
		for _, impl := range fleetImpls {
			if p := pts[impl]; p != nil {
				fmt.Fprintf(b, "| %s | %s | %.0f | %s | %s | %d | %.1f | %.0f MB | %.0f µs | %.0f µs |\n", skew, p.Impl, p.LocksPerSec,
					fmtVal(p.P50, "ms"), fmtVal(p.P99, "ms"), p.PeakConns, p.MeanActive, p.ServerMemAdd, p.ClientCPU, p.ServerCPU)
			}
		}
		for _, impl := range fleetImpls[:2] {
			if lib := pts[impl]; lib != nil && raw != nil {
				fmt.Fprintf(b, "| %s | **%s / raw** | **%.2fx** | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx | %.2fx |\n", skew, impl,
					lib.LocksPerSec/raw.LocksPerSec, lib.P50/raw.P50, lib.P99/raw.P99, float64(lib.PeakConns)/float64(raw.PeakConns),
					lib.MeanActive/raw.MeanActive, lib.ServerMemAdd/raw.ServerMemAdd, lib.ClientCPU/raw.ClientCPU, lib.ServerCPU/raw.ServerCPU)
			}
		}
	}
	b.WriteString("\nTarget: throughput ≥ 0.90x raw with the same connections.\n\n")
	fr.roundsTable(b)
	for _, f := range []string{"throughput", "latency", "connections", "memory", "cpu"} {
		fmt.Fprintf(b, "![Fleet %s](benchmarks-fleet-%s.png)\n\n", f, f)
	}
	fr.sweepTable(b)
	fr.connsTable(b)
	fr.rateTable(b)
}

func (fr fleetResults) sweepTable(b *strings.Builder) {
	if len(fr.Sweep) == 0 {
		return
	}
	fmt.Fprintf(b, "### How the cost grows\n\nOne dimension at a time around the headline shape, %.0f s windows "+
		"(uniform unless marked; the headline's own points are in the table above). Errors count failed calls "+
		"(the first one's text is in benchmarks-fleet.json).\n\n", fr.Sweep[0].Seconds)
	b.WriteString("| replicas × goroutines × names | pool per replica | workload | | locks/s | ratio | p50 | p99 | connections open | client CPU/lock | server CPU/lock | server memory added | errors |\n" +
		"|---|---|---|---|---|---|---|---|---|---|---|---|---|\n")
	for i, p := range fr.Sweep {
		ratio := ratioToAdvisory(fr.Sweep, i)
		fmt.Fprintf(b, "| %d × %d × %d | %d | %s | %s | %.0f | %s | %s | %s | %d | %.0f µs | %.0f µs | %.0f MB | %d |\n",
			p.Procs, p.Goroutines, p.Names, p.Conns, p.Skew, p.Impl, p.LocksPerSec, ratio, fmtVal(p.P50, "ms"), fmtVal(p.P99, "ms"),
			p.PeakConns, p.ClientCPU, p.ServerCPU, p.ServerMemAdd, p.Errors)
	}
	b.WriteString("\n(ratio: advisory's locks/s over raw's, on the raw row.)\n\n")
	for _, f := range []string{"procs", "goroutines", "names", "conns"} {
		fmt.Fprintf(b, "![Fleet scaling: %s](benchmarks-fleet-scaling-%s.png)\n\n", f, f)
	}
}

// findings writes what the tables say, computed from them: what names cost, how the
// cost grows along each swept dimension, and which limit the fleet meets first.
func (fr fleetResults) findings(b *strings.Builder) {
	pts := map[string]fleetPoint{}
	for _, p := range fr.headline() {
		pts[p.Impl+"/"+p.Skew] = p
	}
	lib, key, raw := pts["advisory/uniform"], pts[implKey+"/uniform"], pts["raw/uniform"]
	if raw.LocksPerSec == 0 || key.LocksPerSec == 0 {
		return
	}
	b.WriteString("### Reading the fleet\n\n")
	fmt.Fprintf(b, "- **What names cost.** A named lock's statement carries the name (a comment, "+
		"which `Holders` and `pgadvisory status` read back from pg_stat_activity: docs/keys.md) and, on a direct "+
		"connection, its key as a literal: one SQL text per name. pgx prepares each text once per connection (a "+
		"round trip of its own) and caches it (`statement_cache_capacity`, 512 by default); over 1,000 names, "+
		"prepared on first use, named locks reached 0.26x raw's locks/s (an earlier run of this table). The "+
		"library prepares a name's statement once a connection has run it 32 times, up to half the statement "+
		"cache per connection, so that none is evicted and prepared again (pin_prepared.go, which gives the "+
		"measurements behind 32: a use that prepares costs about three unprepared ones; one connection cycling "+
		"1,000 names, `BenchmarkCycleManyNames`: 1.57x the raw floor before the budget, 1.17x with it). Until "+
		"then the server parses the named statement at each use, which with 1,000 backends each used rarely is "+
		"what a name costs (the statements probe below: 1.31x the by-key statement's server CPU paced, 0.88x its "+
		"locks/s saturated); so such a lock is first tried by key, with the name's comment in the same round "+
		"trip, and only a lock found taken is waited for with the named statement (pin_named.go; 1.06x paced). "+
		"Where more than one try in ten finds its lock taken, as in this saturated fleet, the try costs more "+
		"than it saves, and a Manager's Lock calls then send the named statement at once (trying first once in "+
		"eight, to keep count). "+
		"Named locks reach %.2fx raw's locks/s, uniform, and the same locks taken by key "+
		"(`LockKey`, one text for every key) %.2fx (the median rounds' locks/s; each round's own ratios are "+
		"above). Server memory added (PSS): "+
		"%.0f MB named, %.0f MB by key, %.0f MB raw. A Manager whose callers lock many names and do not need them "+
		"in pg_stat_activity can be made `WithoutNamesInActivity`: it sends `LockKey`'s statements and keeps the "+
		"names in the process (the side-by-side fleet below measures it).%s\n",
		lib.LocksPerSec/raw.LocksPerSec, key.LocksPerSec/raw.LocksPerSec,
		lib.ServerMemAdd, key.ServerMemAdd, raw.ServerMemAdd, fr.rateFinding())
	for _, d := range []struct{ dim, what string }{{"procs", "replicas"}, {"goroutines", "goroutines per replica"}, {"names", "names"}} {
		fr.growth(b, d.dim, d.what)
	}
	need := lib.Procs * lib.Conns
	used := (raw.ClientCPU + raw.ServerCPU) * raw.LocksPerSec / 1e6
	fmt.Fprintf(b, "- **The first limit is max_connections, then the CPUs.** The headline needs %d client connections "+
		"(%d replicas × %d), against PostgreSQL's default max_connections of 100 and the test harness's 300: its "+
		"server: %s. With the library's default pool (`DefaultMaxConns`, 16) the same fleet opens up "+
		"to %d. The shared lock table (max_locks_per_transaction 64 × max_connections slots) is far off: the fleet "+
		"holds at most %d session locks at once (it becomes the limit for a `Session` holding thousands). Once the "+
		"connections are there, the CPUs are the limit: raw's client and server CPU per lock × its locks/s is %.1f "+
		"CPU-seconds per second on this %s.\n", need, lib.Procs, lib.Conns, fr.Settings, lib.Procs*16, lib.Procs*lib.Goroutines,
		used, fr.Machine)
	rate := fr.sweepSeries("names", func(p fleetPoint) float64 { return p.LocksPerSec })
	if len(rate["advisory"]) > 0 && len(rate["raw"]) > 0 && rate["raw"][0].Y > 0 {
		fmt.Fprintf(b, "- **Few names, many callers: the per-key queue.** Callers of one Manager queue per key in the "+
			"process, so at most two per key and replica reach the server, where raw pgx's each wait there in "+
			"pg_advisory_lock (and past deadlock_timeout, 1 s, each runs the deadlock check). Over %g names the "+
			"library takes %.2fx raw's locks/s, with the same connections; compare the not-idle column (server "+
			"sessions running or waiting) in the hot 90/10 rows. Where the CPUs are the limit, as on this machine, fewer "+
			"connections serve more locks for both, and raw pgx with a small pool outruns the library (the "+
			"connections-needed rows): the per-key queue saves connections only where a replica's callers collide "+
			"on names and the pool is large enough for raw's waiters to crowd the server.\n\n",
			rate["advisory"][0].X, rate["advisory"][0].Y/rate["raw"][0].Y)
	}
}

// growth writes how CPU per lock (client + server) and locks/s change along dim.
func (fr fleetResults) growth(b *strings.Builder, dim, what string) {
	cost := fr.sweepSeries(dim, func(p fleetPoint) float64 { return p.ClientCPU + p.ServerCPU })
	rate := fr.sweepSeries(dim, func(p fleetPoint) float64 { return p.LocksPerSec })
	if cost == nil {
		return
	}
	fmt.Fprintf(b, "- **By %s** (CPU per lock, client + server; locks/s):", what)
	for _, impl := range []string{"advisory", "raw"} {
		fmt.Fprintf(b, " %s", impl)
		for i, xy := range cost[impl] {
			sep := ","
			if i == 0 {
				sep = ""
			}
			fmt.Fprintf(b, "%s %g → %.0f µs, %.0f/s", sep, xy.X, xy.Y, rate[impl][i].Y)
		}
		b.WriteString(";")
	}
	b.WriteString("\n")
}
