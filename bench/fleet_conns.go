package main

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"

	"gonum.org/v1/plot/plotter"
)

// The connections question (issue 24, item 3: "fewer connections than raw for the same
// throughput, thanks to the per-key queue"). A lock protects work: here each holder
// sleeps cfg.hold before it releases, so callers that wait for a name wait behind work,
// not behind a CPU. Raw pgx's caller waits in pg_advisory_lock on a pooled connection,
// so every waiter pins one; the library's callers of one replica queue per key in the
// process, and only the head of each key's queue waits on a connection. The question is
// asked with the hot-key skew, over the headline's names and over a tenth of them (more
// of a replica's callers then want the same name), for pool sizes from 5 to one per
// goroutine, each point with the library and with raw pgx.

// fleetConnsPools are the pool sizes per replica asked about.
func fleetConnsPools(cfg fleetConfig) []int {
	out := []int{5, 10, 25}
	if cfg.goroutines > 25 {
		out = append(out, cfg.goroutines)
	}
	return out
}

func fleetConnsShapes(cfg fleetConfig) []childShape {
	var out []childShape
	for _, names := range []int{cfg.names, max(cfg.names/10, 1)} {
		for _, c := range fleetConnsPools(cfg) {
			for _, impl := range []string{"advisory", "raw"} {
				out = append(out, childShape{impl: impl, hot: true, procs: cfg.procs, goroutines: cfg.goroutines,
					names: names, conns: c, duration: cfg.sweepDuration, hold: cfg.hold, group: "conns"})
			}
		}
	}
	return out
}

// connsSeries returns locks/s against the pool size, per implementation, for one name count.
func (fr fleetResults) connsSeries(names int) map[string]plotter.XYs {
	out := map[string]plotter.XYs{}
	for _, p := range fr.Conns {
		if p.Names == names && p.Locks > 0 {
			out[p.Impl] = append(out[p.Impl], plotter.XY{X: float64(p.Conns), Y: p.LocksPerSec})
		}
	}
	for _, xys := range out {
		sort.Slice(xys, func(i, j int) bool { return xys[i].X < xys[j].X })
	}
	return out
}

// connsNames returns the name counts the question was asked with, largest first.
func (fr fleetResults) connsNames() []int {
	seen := map[int]bool{}
	var out []int
	for _, p := range fr.Conns {
		if !seen[p.Names] {
			seen[p.Names] = true
			out = append(out, p.Names)
		}
	}
	sort.Sort(sort.Reverse(sort.IntSlice(out)))
	return out
}

// fewestFor returns the smallest pool per replica at which xys reaches at least share
// of target, or 0 if none does.
func fewestFor(xys plotter.XYs, target, share float64) int {
	for _, xy := range xys {
		if xy.Y >= share*target {
			return int(xy.X)
		}
	}
	return 0
}

func (fr fleetResults) connsTable(b *strings.Builder) {
	if len(fr.Conns) == 0 {
		return
	}
	p0 := fr.Conns[0]
	fmt.Fprintf(b, "### Connections needed, with work under the lock\n\n"+
		"%d replicas × %d goroutines, hot 90/10; each holder works (sleeps) %g ms before it releases; %.0f s "+
		"windows; pool size per replica varied. Raw pgx's waiters each wait in pg_advisory_lock on a pooled "+
		"connection; the library's callers of one replica queue per key in the process, and only the head of "+
		"each key's queue waits on a connection.\n\n", p0.Procs, p0.Goroutines, p0.HoldMS, p0.Seconds)
	b.WriteString("| names | pool per replica | | locks/s | ratio | p50 | p99 | connections open | not idle (mean) | errors |\n" +
		"|---|---|---|---|---|---|---|---|---|---|\n")
	for i, p := range fr.Conns {
		ratio := ratioToAdvisory(fr.Conns, i)
		fmt.Fprintf(b, "| %d | %d | %s | %.0f | %s | %s | %s | %d | %.1f | %d |\n", p.Names, p.Conns, p.Impl, p.LocksPerSec,
			ratio, fmtVal(p.P50, "ms"), fmtVal(p.P99, "ms"), p.PeakConns, p.MeanActive, p.Errors)
	}
	b.WriteString("\n(ratio: advisory's locks/s over raw's with the same pool, on the raw row.)\n\n")
	for _, n := range fr.connsNames() {
		s := fr.connsSeries(n)
		best := 0.0
		for _, xy := range s["raw"] {
			best = max(best, xy.Y)
		}
		if best == 0 {
			continue
		}
		lib, raw := fewestFor(s["advisory"], best, 0.9), fewestFor(s["raw"], best, 0.9)
		fmt.Fprintf(b, "- **Over %d names:** raw pgx's best is %.0f locks/s. 90 %% of it takes %s per replica with "+
			"raw pgx and %s with the library.", n, best, poolWords(raw), poolWords(lib))
		busy := map[string]float64{}
		for _, p := range fr.Conns {
			if p.Names == n && p.Conns == int(s["raw"][len(s["raw"])-1].X) {
				busy[p.Impl] = p.MeanActive
			}
		}
		if busy["raw"] > 0 {
			fmt.Fprintf(b, " With the largest pool, %.1f of the library's connections are busy (running or waiting "+
				"on the server) on average, against %.1f of raw pgx's (%.2fx).", busy["advisory"], busy["raw"],
				busy["advisory"]/busy["raw"])
		}
		b.WriteString("\n")
	}
	b.WriteString("\n")
	for _, n := range fr.connsNames() {
		fmt.Fprintf(b, "![Fleet connections needed, %d names](benchmarks-fleet-conns-%d.png)\n\n", n, n)
	}
}

func poolWords(n int) string {
	if n == 0 {
		return "no pool size measured"
	}
	return fmt.Sprintf("a pool of %d", n)
}

func (fr fleetResults) plotConns(dir string) error {
	for _, n := range fr.connsNames() {
		s := fr.connsSeries(n)
		if len(s["advisory"]) < 2 {
			continue
		}
		title := fmt.Sprintf("Locks/s by pool size, hot 90/10 over %d names, %g ms of work held", n, fr.Conns[0].HoldMS)
		if err := linePlot(filepath.Join(dir, fmt.Sprintf("benchmarks-fleet-conns-%d.png", n)), title,
			"pool size per replica", "locks/s", false, s); err != nil {
			return err
		}
	}
	return nil
}

// ratioToAdvisory returns, on a raw row that follows the library's row of the same
// shape, the library's locks/s over raw's ("" on every other row).
func ratioToAdvisory(pts []fleetPoint, i int) string {
	p := pts[i]
	if p.Impl != "raw" || i == 0 || pts[i-1].Impl != "advisory" || p.LocksPerSec == 0 {
		return ""
	}
	return fmt.Sprintf("%.2fx", pts[i-1].LocksPerSec/p.LocksPerSec)
}
