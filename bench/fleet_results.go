package main

import (
	"encoding/json"
	"os"
	"strings"
)

// The fleet's results file: written, and carried over between runs.

// write stores res as docs/benchmarks-fleet.json.
func (res fleetResults) write(docs string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(docs+"/benchmarks-fleet.json", append(b, '\n'), 0o644)
}

// perFive sums a per-second series in five-second steps.
func perFive(s []int64) []int64 {
	var out []int64
	for i, n := range s {
		if i%5 == 0 {
			out = append(out, 0)
		}
		out[len(out)-1] += n
	}
	return out
}

// carryOver keeps, from the results file this run replaces, the questions this run did
// not ask (-fleet-sweep=false, -fleet-conns=false, -fleet-rate 0), and says so in Note:
// their rows then come from an earlier run, whose load and time are not this run's.
func (res *fleetResults) carryOver(cfg fleetConfig) {
	old, ok := loadFleet(cfg.docs)
	if !ok {
		return
	}
	var kept []string
	if !cfg.sweep && len(old.Sweep) > 0 {
		res.Sweep, kept = old.Sweep, append(kept, "the sweep")
	}
	if !cfg.conns && len(old.Conns) > 0 {
		res.Conns, kept = old.Conns, append(kept, "the connections question")
	}
	if cfg.rate <= 0 && len(old.Rate) > 0 {
		res.Rate, kept = old.Rate, append(kept, "the cost question")
	}
	if len(kept) > 0 {
		res.Note = "The rows of " + strings.Join(kept, " and ") + " come from an earlier run of this benchmark (" +
			old.Took + ", load " + old.Load + "); the headline's from the run described above."
	}
}
