package main

import (
	"fmt"
	"strings"
	"time"
)

// The cost question: what one lock costs the client's and the server's CPUs at the
// same throughput. In the headline each implementation runs as fast as the machine
// lets it, and on a machine whose CPUs are the limit that figure is circular: every
// point uses all the CPU there is, so CPU per lock is only the inverse of its own
// throughput, shared out between client and server by the scheduler. Here every
// replica's goroutines are paced (pacer, below) so that the fleet asks for the
// same cfg.rate locks/s of each implementation, below what any of them can take: the
// CPU each then uses is what its locks cost, and the acquire latency is the latency of
// a fleet that is not saturated.

// fleetRateShapes returns the cost question's points: one round of the headline's, each
// at cfg.rate locks/s, with the sweep's shorter windows.
func fleetRateShapes(cfg fleetConfig) []childShape {
	out := headlineRound(cfg, 0)
	for i := range out {
		out[i].duration, out[i].rate, out[i].group = cfg.sweepDuration, cfg.rate, "rate"
	}
	return out
}

// rateTable writes the cost question's rows: CPU per lock and acquire latency at the
// same offered locks/s, with each implementation's ratio to raw pgx of the same workload.
func (fr fleetResults) rateTable(b *strings.Builder) {
	if len(fr.Rate) == 0 {
		return
	}
	p0 := fr.Rate[0]
	fmt.Fprintf(b, "### What a lock costs at the same throughput\n\n"+
		"The headline runs every implementation as fast as the CPUs let it, so its CPU per lock is each point's "+
		"whole CPU divided by its own locks/s: whichever takes fewer locks shows a higher cost per lock, whatever "+
		"the reason. Here the fleet (%d replicas × %d goroutines, %d names) is paced: each goroutine takes a lock "+
		"at an even interval, so that every implementation is asked for the same %.0f locks/s in all, below what "+
		"any of them can take; %.0f s windows. CPU per lock is then what its locks cost the client processes and "+
		"the server, and the latency is that of a fleet that is not saturated. Client CPU includes the Go "+
		"runtime's cost of sleeping and waking each goroutine between its locks, the same for every "+
		"implementation.\n\n", p0.Procs, p0.Goroutines, p0.Names, p0.Offered, p0.Seconds)
	b.WriteString("| workload | | locks/s | p50 | p99 | client CPU per lock | server CPU per lock | client + server / raw's |\n" +
		"|---|---|---|---|---|---|---|---|\n")
	for _, p := range fr.Rate {
		vs := ""
		for _, r := range fr.Rate {
			if r.Impl == "raw" && r.Skew == p.Skew && r.ClientCPU+r.ServerCPU > 0 {
				vs = fmt.Sprintf("%.2fx", (p.ClientCPU+p.ServerCPU)/(r.ClientCPU+r.ServerCPU))
			}
		}
		fmt.Fprintf(b, "| %s | %s | %.0f | %s | %s | %.0f µs | %.0f µs | %s |\n", p.Skew, p.Impl, p.LocksPerSec,
			fmtVal(p.P50, "ms"), fmtVal(p.P99, "ms"), p.ClientCPU, p.ServerCPU, vs)
	}
	b.WriteString("\n")
}

// rateFinding says, from the cost question's uniform rows, what a lock costs each
// implementation at the same throughput ("" when the question was not asked).
func (fr fleetResults) rateFinding() string {
	pts := map[string]fleetPoint{}
	for _, p := range fr.Rate {
		if p.Skew == "uniform" {
			pts[p.Impl] = p
		}
	}
	lib, key, raw := pts["advisory"], pts[implKey], pts["raw"]
	if raw.Locks == 0 || key.Locks == 0 || lib.Locks == 0 {
		return ""
	}
	total := func(p fleetPoint) float64 { return p.ClientCPU + p.ServerCPU }
	return fmt.Sprintf("\n- **Saturated is not the same as costlier.** At the same %.0f locks/s (the cost question), a "+
		"uniform lock costs the server %.0f µs named, %.0f µs by key and %.0f µs raw, and the client processes %.0f, "+
		"%.0f and %.0f µs: client and server together %.2fx and %.2fx raw's. A named lock's acquire takes %.2f ms at "+
		"the median against %.2f ms by key and %.2f ms raw: a free named lock is tried by key, with the name's comment in the same round trip, and the server parses the named statement only for a lock found taken (pin_named.go; an earlier run, when every named lock was parsed, measured 0.55 ms against 0.38 ms by key). In the "+
		"headline every implementation runs the CPUs full, its CPU per lock is the inverse of its own locks/s, and "+
		"its p99 acquire latency is past PostgreSQL's deadlock_timeout (1 s): those rows say how each behaves "+
		"overloaded, and their rounds spread as wide as the differences they show.",
		raw.Offered, lib.ServerCPU, key.ServerCPU, raw.ServerCPU, lib.ClientCPU, key.ClientCPU, raw.ClientCPU,
		total(lib)/total(raw), total(key)/total(raw), lib.P50, key.P50, raw.P50)
}

// pacer spaces one goroutine's locks when the spec is paced (Rate > 0): each goroutine
// takes one lock every Goroutines/Rate seconds, the goroutines' turns staggered across
// that interval, so the replica offers Rate locks/s in an even stream. A goroutine
// that falls behind does not catch up in a burst: it starts its next lock at once and
// counts its interval from there, so an overloaded fleet takes fewer locks than offered
// (the point reports both).
type pacer struct {
	every time.Duration // 0: not paced
	next  time.Time
}

func newPacer(spec childSpec, g int, start time.Time) *pacer {
	if spec.Rate <= 0 {
		return &pacer{}
	}
	every := time.Duration(float64(spec.Goroutines) / spec.Rate * float64(time.Second))
	return &pacer{every: every, next: start.Add(every * time.Duration(g) / time.Duration(spec.Goroutines))}
}

func (p *pacer) wait() {
	if p.every == 0 {
		return
	}
	if d := time.Until(p.next); d > 0 {
		time.Sleep(d)
		p.next = p.next.Add(p.every)
		return
	}
	p.next = time.Now().Add(p.every)
}
