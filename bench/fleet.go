package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/jackc/pgx/v5"
)

// The fleet benchmark (issue 24, item 3): tens of replicas against one server. Each
// replica is a child process (fleet_child.go); the library and raw pgx run the same
// workload with the same pool size per replica, uniform and with a hot-key skew, and the
// parent measures the server around the timed window (fleet_server.go).

// fleetConfig is what -fleet's flags set.
type fleetConfig struct {
	procs, goroutines, names int
	duration, sweepDuration  time.Duration
	warmup                   time.Duration
	sweep                    bool
	hold                     time.Duration // the connections question's work under the lock (fleet_conns.go)
	conns                    bool          // also ask it
	rate                     float64       // the cost question's offered locks/s, whole fleet (fleet_rate.go); 0: not asked
	rounds                   int           // the headline's rounds (each runs every headline point once)
	docs                     string
}

// fleetPoint is one measured configuration.
type fleetPoint struct {
	Impl         string  `json:"impl"` // "advisory", implKey or "raw"
	Skew         string  `json:"skew"` // "uniform" or "hot 90/10"
	Procs        int     `json:"procs"`
	Goroutines   int     `json:"goroutines"`
	Names        int     `json:"names"`
	Conns        int     `json:"conns_per_proc"`          // pool size of each replica
	HoldMS       float64 `json:"hold_ms,omitempty"`       // work under the lock: the holder sleeps this long
	Offered      float64 `json:"offered_per_s,omitempty"` // paced: locks/s asked of the whole fleet (0: as fast as it can)
	Round        int     `json:"round,omitempty"`         // the headline's round (from 0)
	Seconds      float64 `json:"seconds"`
	Locks        int64   `json:"locks"`
	Errors       int64   `json:"errors"`
	FirstError   string  `json:"first_error,omitempty"`
	LocksPerSec  float64 `json:"locks_per_s"`
	P50          float64 `json:"p50_ms"` // acquire latency: from the call to holding the lock
	P99          float64 `json:"p99_ms"`
	PeakConns    int     `json:"peak_conns"`      // client backends on the server, most seen
	MeanActive   float64 `json:"mean_active"`     // of those, not idle (running or waiting), mean
	ServerMemMB  float64 `json:"server_pss_mb"`   // PSS of every server process, end of the window
	ServerMemAdd float64 `json:"server_added_mb"` // ServerMemMB minus the server's before the replicas connected
	ClientCPU    float64 `json:"client_cpu_us_per_lock"`
	ServerCPU    float64 `json:"server_cpu_us_per_lock"`
	Load         string  `json:"load"`                 // /proc/loadavg after the point
	PerSecond    []int64 `json:"per_second,omitempty"` // locks in each second from GO, warm-up included
}

// fleetResults is docs/benchmarks-fleet.json.
type fleetResults struct {
	Machine  string       `json:"machine"`
	Settings string       `json:"server_settings"`
	Load     string       `json:"load"` // at the start and at the end of the run
	Took     string       `json:"took"`
	Warmup   string       `json:"warmup"` // untimed before each window
	Main     []fleetPoint `json:"main"`
	Sweep    []fleetPoint `json:"sweep,omitempty"`
	Conns    []fleetPoint `json:"conns,omitempty"` // the connections question (fleet_conns.go)
	Rate     []fleetPoint `json:"rate,omitempty"`  // the cost question (fleet_rate.go)
	Note     string       `json:"note,omitempty"`  // set by hand when rows come from different runs
	// Rotated says the headline's rounds each began with another implementation (see
	// headlineRound); before stop 30 every round ran them in table order.
	Rotated bool `json:"rotated,omitempty"`
	// Carried names, for each question whose rows this run kept from the results file it
	// replaced (see carryOver), the run that measured them: its time and load.
	Carried map[string]string `json:"carried,omitempty"`
}

// fleetImpls are the headline's implementations, in table order.
var fleetImpls = []string{"advisory", implKey, "raw"}

// fleetMain returns the headline points: library and raw, uniform and skewed, interleaved
// so that drift hits both alike, cfg.rounds times over. One window of this fleet is one
// sample: on a 2-CPU machine raw pgx's own locks/s moved by 12-30 % between runs, so
// every point is taken in several rounds, each round running every point once, and the
// report gives each round's ratios and their spread.
func fleetMain(cfg fleetConfig) []childShape {
	var out []childShape
	for r := range max(cfg.rounds, 1) {
		for _, sh := range headlineRound(cfg, r) {
			sh.round = r
			out = append(out, sh)
		}
	}
	return out
}

// headlineRound returns round r of the headline's points: each implementation, uniform,
// then each with the hot-key skew, the implementations' order rotated by r. A round's
// points run one after the other, and a fixed order would give each implementation the
// same place in every round: in one run of stop 30, round 1 in table order measured
// named 2,255, LockKey 2,310 and raw 3,334 locks/s: whether the last place helped, one
// round cannot tell, and a fixed order cannot separate the two. Rotated, every
// implementation runs first, second and third equally often in any multiple of three
// rounds.
func headlineRound(cfg fleetConfig, r int) []childShape {
	var out []childShape
	for _, hot := range []bool{false, true} {
		for i := range fleetImpls {
			impl := fleetImpls[(i+r)%len(fleetImpls)]
			out = append(out, childShape{impl: impl, hot: hot, procs: cfg.procs, goroutines: cfg.goroutines, names: cfg.names,
				conns: cfg.goroutines, duration: cfg.duration, group: "main"})
		}
	}
	return out
}

// childShape is one configuration to run.
type childShape struct {
	impl                     string
	hot                      bool
	procs, goroutines, names int
	conns                    int // pool size per replica
	duration                 time.Duration
	hold                     time.Duration // work under the lock
	rate                     float64       // offered locks/s, whole fleet; 0: every goroutine as fast as it can
	round                    int           // the headline's round
	group                    string        // "main", "sweep", "conns" or "rate": where its point is reported
}

// fleetSweep varies one dimension at a time around the headline shape, uniform, with
// shorter windows.
func fleetSweep(cfg fleetConfig) []childShape {
	var out []childShape
	add := func(p, g, n int) {
		for _, impl := range []string{"advisory", "raw"} {
			out = append(out, childShape{impl: impl, procs: p, goroutines: g, names: n, conns: g,
				duration: cfg.sweepDuration, group: "sweep"})
		}
	}
	for _, p := range []int{1, 5, 10} {
		add(p, cfg.goroutines, cfg.names)
	}
	for _, g := range []int{10, 25} {
		add(cfg.procs, g, cfg.names)
	}
	for _, n := range []int{10, 100, 10000} {
		add(cfg.procs, cfg.goroutines, n)
	}
	// Fewer connections than callers, with the hot-key skew: what the per-key queue saves.
	for _, c := range []int{10, 25} {
		for _, impl := range []string{"advisory", "raw"} {
			out = append(out, childShape{impl: impl, hot: true, procs: cfg.procs, goroutines: cfg.goroutines,
				names: cfg.names, conns: c, duration: cfg.sweepDuration, group: "sweep"})
		}
	}
	return out
}

// runFleet starts a server with room for the fleet's connections, runs the points and
// writes docs/benchmarks-fleet.json, its plots and benchmarks.md's fleet section.
func runFleet(ctx context.Context, cfg fleetConfig, self string, log io.Writer) error {
	start, load := time.Now(), loadAverage()
	shapes := fleetMain(cfg)
	if cfg.sweep {
		shapes = append(shapes, fleetSweep(cfg)...)
	}
	if cfg.conns {
		shapes = append(shapes, fleetConnsShapes(cfg)...)
	}
	if cfg.rate > 0 {
		shapes = append(shapes, fleetRateShapes(cfg)...)
	}
	most := 0
	for _, sh := range shapes {
		most = max(most, sh.procs*sh.conns)
	}
	ms, err := startMetered(ctx, most+50)
	if err != nil {
		return err
	}
	defer ms.Close()
	srv, settings, admin, sm := ms.srv, ms.settings, ms.admin, ms.meter
	if ms.meterErr != nil {
		fmt.Fprintf(log, "bench: the server's processes cannot be read (%v): no server CPU or memory\n", ms.meterErr)
	}
	res := fleetResults{Machine: machineLine(), Settings: settings, Warmup: cfg.warmup.String(), Rotated: true}
	// The first point after the server started ran at 0.68x and 0.86x of the same point's
	// later rounds (advisory, uniform, 3 rounds): one untimed point first, not reported.
	if len(shapes) > 0 {
		prime := shapes[0]
		prime.duration = cfg.warmup
		if _, err := runPoint(ctx, prime, cfg.warmup, self, srv.DSN(), admin, sm); err != nil {
			return err
		}
		fmt.Fprintf(log, "fleet: primed the server with an untimed %s point (%v)\n", prime.impl, time.Since(start).Round(time.Second))
	}
	for i, sh := range shapes {
		pt, err := runPoint(ctx, sh, cfg.warmup, self, srv.DSN(), admin, sm)
		if err != nil {
			return err
		}
		fmt.Fprintf(log, "fleet %d/%d: %s %s %d×%d×%d, %d conns each, hold %v: %.0f locks/s, p50 %.2f ms, p99 %.2f ms, %d conns, %.1f not idle, %d errors (%v)\n",
			i+1, len(shapes), pt.Impl, pt.Skew, pt.Procs, pt.Goroutines, pt.Names, pt.Conns, sh.hold, pt.LocksPerSec, pt.P50, pt.P99,
			pt.PeakConns, pt.MeanActive, pt.Errors, time.Since(start).Round(time.Second))
		fmt.Fprintf(log, "  CPU per lock: client %.0f µs, server %.0f µs; locks per 5 s: %v\n", pt.ClientCPU, pt.ServerCPU, perFive(pt.PerSecond))
		switch sh.group {
		case "main":
			res.Main = append(res.Main, pt)
		case "sweep":
			res.Sweep = append(res.Sweep, pt)
		case "rate":
			res.Rate = append(res.Rate, pt)
		default:
			res.Conns = append(res.Conns, pt)
		}
	}
	res.Load, res.Took = load+" → "+loadAverage(), time.Since(start).Round(time.Second).String()
	res.carryOver(cfg)
	if err := res.write(cfg.docs); err != nil {
		return err
	}
	return renderFrom(cfg.docs, "")
}

// runPoint runs one configuration: starts the replicas, waits until each is connected,
// starts them together, meters the server over the timed window and gathers the results.
func runPoint(ctx context.Context, sh childShape, warmup time.Duration, self, dsn string, admin *pgx.Conn, sm *serverMeter) (fleetPoint, error) {
	pt := fleetPoint{Impl: sh.impl, Skew: map[bool]string{false: "uniform", true: "hot 90/10"}[sh.hot],
		Procs: sh.procs, Goroutines: sh.goroutines, Names: sh.names, Conns: sh.conns, Seconds: sh.duration.Seconds(),
		HoldMS: float64(sh.hold) / float64(time.Millisecond), Offered: sh.rate, Round: sh.round}
	base := sm.memory()
	kids := make([]*fleetKid, 0, sh.procs)
	defer func() {
		for _, k := range kids {
			k.stop()
		}
	}()
	// The replicas start together; each opens its connections two at a time (a thousand
	// connects at once time out).
	for p := 0; p < sh.procs; p++ {
		spec := childSpec{Impl: sh.impl, Goroutines: sh.goroutines, Names: sh.names, Hot: sh.hot, Conns: sh.conns, Waits: sharedWaits,
			Warmup: warmup, Duration: sh.duration, Hold: sh.hold, Rate: sh.rate / float64(sh.procs), Seed: uint64(p + 1), DSNExtra: os.Getenv("BENCH_FLEET_DSN_EXTRA")}
		k, err := startKid(self, dsn, spec)
		if err != nil {
			return pt, err
		}
		kids = append(kids, k)
	}
	for _, k := range kids {
		if err := k.waitLine("READY"); err != nil {
			return pt, err
		}
	}
	for _, k := range kids {
		fmt.Fprintln(k.stdin, "GO")
	}
	time.Sleep(warmup)
	cpu0 := sm.cpu()
	samples := sm.sampleConns(ctx, admin, sh.duration)
	cpu1 := sm.cpu()
	pt.ServerMemMB = sm.memory()
	pt.ServerMemAdd = pt.ServerMemMB - base
	hist := map[int]uint64{}
	var clientCPU time.Duration
	for _, k := range kids {
		r, err := k.result()
		if err != nil {
			return pt, err
		}
		pt.Locks, pt.Errors, clientCPU = pt.Locks+r.Locks, pt.Errors+r.Errors, clientCPU+r.CPU
		if pt.FirstError == "" {
			pt.FirstError = r.FirstError
		}
		for b, n := range r.Hist {
			hist[b] += n
		}
		for i, n := range r.PerSecond {
			if i >= len(pt.PerSecond) {
				pt.PerSecond = append(pt.PerSecond, 0)
			}
			pt.PerSecond[i] += n
		}
	}
	pt.LocksPerSec = float64(pt.Locks) / sh.duration.Seconds()
	pt.P50, pt.P99 = histQuantile(hist, 0.5), histQuantile(hist, 0.99)
	pt.PeakConns, pt.MeanActive = samples.peak, samples.meanActive
	if pt.Locks > 0 {
		pt.ClientCPU = float64(clientCPU.Microseconds()) / float64(pt.Locks)
		pt.ServerCPU = float64((cpu1-cpu0)/time.Microsecond) / float64(pt.Locks)
	}
	pt.Load = loadAverage()
	for _, k := range kids {
		k.stop()
	}
	kids = nil
	return pt, sm.waitIdle(ctx, admin)
}
