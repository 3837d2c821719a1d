package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Issue 38's fleet (-shared): raw pgx, the library's default, the library with
// WithSharedSessions, and with WithWaitSessions too, one after another in rotated order, each holder working under the
// lock, uniform and hot 90/10. Each point is the fleet's runPoint: locks/s, acquire
// latency, the server's client backends (most seen) and memory. Printed, and written to
// -docs's benchmarks-shared.json.

// implShared is the library with holdings sharing sessions (advisory.WithSharedSessions).
const implShared = "advisory WithSharedSessions"

// implParked is implShared with WithWaitSessions(sharedWaits): past that many waits on
// sessions of their own, a replica's Locks wait without a session.
const implParked = "advisory WithWaitSessions"

// implBudget is implShared within raw's connection budget: its pool capped at
// -shared-raw-conns per replica, as implRawBudget's is, and no WithWaitSessions, so that a
// Lock whose key is taken waits in the server's queue on a session of its own once the
// pool has one to give, as raw's callers wait for a connection (issue 47: parking, at the
// same budget, lost on hot keys). implBudgetNoNames is the same Manager made
// WithoutNamesInActivity: statements that carry no name, as raw's carry none.
const (
	implBudget        = "advisory at budget"
	implBudgetNoNames = "advisory at budget WithoutNamesInActivity"
)

// atBudget reports the implementations whose pools are capped at raw's connection budget
// (-shared-raw-conns).
func atBudget(impl string) bool {
	return impl == implRawBudget || impl == implBudget || impl == implBudgetNoNames
}

// sharedWaits is implParked's WithWaitSessions bound per replica (-shared-waits).
var sharedWaits = 6

// The raw floors of issue 47 beside plain "raw" (a pool of a connection per goroutine,
// all opened before the window): raw at the connection budget the shared sessions use
// (-shared-raw-conns per replica, opened before the window), and raw's pool as a
// program sizes it and lets it open connections as they are needed.
const (
	implRawBudget   = "raw same budget"
	implRawOnDemand = "raw on demand"
)

// implRawLessOne is raw with one connection fewer than the budget per replica: what raw
// does with the connections that "advisory at budget" has left for waits once one is its
// shared session.
const implRawLessOne = "raw budget less one"

// sharedRawConns is implRawBudget's pool per replica (-shared-raw-conns).
var sharedRawConns = 7

// isRaw reports the raw implementations, which the library's are compared with.
func isRaw(impl string) bool {
	return impl == "raw" || impl == implRawBudget || impl == implRawOnDemand || impl == implRawLessOne
}

// sharedPerSession is the bench's WithSharedSessions bound: high enough never to bind,
// so that what is measured is how many sessions the traffic itself needs.
const sharedPerSession = 1000

// sharedConfig is what -shared's flags set, with the fleet's shape (fleetConfig).
type sharedConfig struct {
	rounds   int
	duration time.Duration
	impls    string // comma-separated, beside raw; "": all
	skews    string // "uniform", "hot" or both, comma-separated
}

// sharedResults is docs/benchmarks-shared.json: the last -shared run of each number of
// names ("fleet_1000_names"), and the -shared-idle runs.
type sharedResults struct {
	Machine  string                    `json:"machine"`
	Settings string                    `json:"server_settings"`
	Fleets   map[string]sharedFleetRun `json:"-"`
	Idle     []idlePoint               `json:"idle,omitempty"`
}

// sharedFleetRun is one -shared run.
type sharedFleetRun struct {
	Load   string       `json:"load"`
	Took   string       `json:"took"`
	Points []fleetPoint `json:"points"`
}

// MarshalJSON writes each fleet run as a key of its own beside the others.
func (r sharedResults) MarshalJSON() ([]byte, error) {
	m := map[string]any{"machine": r.Machine, "server_settings": r.Settings}
	if len(r.Idle) > 0 {
		m["idle"] = r.Idle
	}
	for k, v := range r.Fleets {
		m[k] = v
	}
	return json.Marshal(m)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *sharedResults) UnmarshalJSON(b []byte) error {
	var m map[string]json.RawMessage
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	r.Fleets = map[string]sharedFleetRun{}
	for k, v := range m {
		var err error
		switch {
		case k == "machine":
			err = json.Unmarshal(v, &r.Machine)
		case k == "server_settings":
			err = json.Unmarshal(v, &r.Settings)
		case k == "idle":
			err = json.Unmarshal(v, &r.Idle)
		case strings.HasPrefix(k, "fleet_"):
			var f sharedFleetRun
			err = json.Unmarshal(v, &f)
			r.Fleets[k] = f
		}
		if err != nil {
			return err
		}
	}
	return nil
}

func runSharedFleet(ctx context.Context, cfg fleetConfig, sc sharedConfig, self string, out io.Writer) error {
	start, load := time.Now(), loadAverage()
	impls := []string{"raw", "advisory", implShared, implParked, implBudget, implBudgetNoNames}
	if sc.impls != "" { // raw first: the ratios are to it
		impls = append([]string{"raw"}, strings.Split(sc.impls, ",")...)
	}
	ms, err := startMetered(ctx, cfg.procs*cfg.goroutines+50)
	if err != nil {
		return err
	}
	defer ms.Close()
	fmt.Fprintf(out, "shared fleet: %d replicas × %d goroutines (pools of %d) over %d names, work %v under each lock, "+
		"%v windows after %v untimed, %d rounds, order rotated; %s; %s; unpinned; load %s\n", cfg.procs, cfg.goroutines,
		cfg.goroutines, cfg.names, cfg.hold, sc.duration, cfg.warmup, sc.rounds, ms.settings, machineLine(), load)
	var res sharedFleetRun
	prime := childShape{impl: "raw", procs: cfg.procs, goroutines: cfg.goroutines, names: cfg.names, conns: cfg.goroutines,
		duration: cfg.warmup, hold: cfg.hold}
	if _, err := runPoint(ctx, prime, cfg.warmup, self, ms.srv.DSN(), ms.admin, ms.meter); err != nil {
		return err
	}
	for r := range sc.rounds {
		for _, hot := range []bool{false, true} {
			if !strings.Contains(sc.skews, map[bool]string{false: "uniform", true: "hot"}[hot]) {
				continue
			}
			for i := range impls {
				sh := childShape{impl: impls[(i+r)%len(impls)], hot: hot, procs: cfg.procs, goroutines: cfg.goroutines,
					names: cfg.names, conns: cfg.goroutines, duration: sc.duration, hold: cfg.hold, round: r}
				switch {
				case atBudget(sh.impl):
					sh.conns = sharedRawConns
				case sh.impl == implRawLessOne:
					sh.conns = sharedRawConns - 1
				}
				pt, err := runPoint(ctx, sh, cfg.warmup, self, ms.srv.DSN(), ms.admin, ms.meter)
				if err != nil {
					return err
				}
				fmt.Fprintf(out, "round %d %-28s %-9s %6.0f locks/s  p50 %6.2f ms  p99 %7.2f ms  %4d conns  server +%5.0f MB  "+
					"client %4.0f µs/lock  %d errors %s\n", r+1, pt.Impl, pt.Skew, pt.LocksPerSec, pt.P50, pt.P99, pt.PeakConns,
					pt.ServerMemAdd, pt.ClientCPU, pt.Errors, pt.FirstError)
				res.Points = append(res.Points, pt)
			}
		}
	}
	printSharedRatios(out, res.Points, impls, sc.rounds)
	res.Load, res.Took = load+" → "+loadAverage(), time.Since(start).Round(time.Second).String()
	return writeShared(cfg.docs, func(r *sharedResults) {
		r.Machine, r.Settings = machineLine(), ms.settings
		r.Fleets[fmt.Sprintf("fleet_%d_names", cfg.names)] = res
	})
}

// printSharedRatios prints, per skew, every library implementation's locks/s and server
// connections over each raw one's, per round, and the median p50 and p99 of each.
func printSharedRatios(out io.Writer, pts []fleetPoint, impls []string, rounds int) {
	for _, skew := range []string{"uniform", "hot 90/10"} {
		if !slices.ContainsFunc(pts, func(p fleetPoint) bool { return p.Skew == skew }) {
			continue
		}
		for _, impl := range impls {
			var p50, p99 []float64
			for r := range rounds {
				pt := pointOf(pts, impl, skew, r)
				p50, p99 = append(p50, pt.P50), append(p99, pt.P99)
			}
			fmt.Fprintf(out, "%s, %s: p50 %.2f ms, p99 %.2f ms (medians over %d rounds)\n", impl, skew, median(p50), median(p99), rounds)
		}
		for _, base := range impls {
			for _, impl := range impls {
				if !isRaw(base) || isRaw(impl) {
					continue
				}
				var rate, conns []float64
				for r := range rounds {
					raw, it := pointOf(pts, base, skew, r), pointOf(pts, impl, skew, r)
					rate = append(rate, it.LocksPerSec/raw.LocksPerSec)
					conns = append(conns, float64(it.PeakConns)/float64(raw.PeakConns))
				}
				fmt.Fprintf(out, "%s, %s / %s: locks/s %s; server connections %s\n", impl, skew, base,
					spreadOver(rate, "rounds"), spreadOver(conns, "rounds"))
			}
		}
	}
}

// pointOf returns the point of impl and skew in round r.
func pointOf(pts []fleetPoint, impl, skew string, r int) fleetPoint {
	i := slices.IndexFunc(pts, func(p fleetPoint) bool { return p.Impl == impl && p.Skew == skew && p.Round == r })
	return pts[i]
}

// writeShared updates -docs's benchmarks-shared.json with set, keeping what set leaves.
func writeShared(docs string, set func(*sharedResults)) error {
	path := filepath.Join(docs, "benchmarks-shared.json")
	res := sharedResults{Fleets: map[string]sharedFleetRun{}}
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &res); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	set(&res)
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
