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
// not ask (-fleet-sweep=false, -fleet-conns=false, -fleet-rate 0), with the run that
// measured each (Carried): a question carried over again keeps the run that measured it,
// not the run that carried it last.
func (res *fleetResults) carryOver(cfg fleetConfig) {
	old, ok := loadFleet(cfg.docs)
	if !ok {
		return
	}
	keep := func(question string, asked bool, rows []fleetPoint, dst *[]fleetPoint) {
		if asked || len(rows) == 0 {
			return
		}
		from := old.Carried[question]
		if from == "" {
			from = old.Took + ", load " + old.Load
		}
		if res.Carried == nil {
			res.Carried = map[string]string{}
		}
		*dst, res.Carried[question] = rows, from
	}
	keep(questionSweep, cfg.sweep, old.Sweep, &res.Sweep)
	keep(questionConns, cfg.conns, old.Conns, &res.Conns)
	keep(questionRate, cfg.rate > 0, old.Rate, &res.Rate)
}

// The questions besides the headline, as carryOver and carriedNote name them.
const (
	questionSweep = "the sweep"
	questionConns = "the connections question"
	questionRate  = "the cost question"
)

// carriedNote says which rows come from an earlier run than the headline's, and from
// which ("" when every row is this run's).
func (fr fleetResults) carriedNote() string {
	var notes []string
	done := map[string]bool{}
	for _, q := range []string{questionSweep, questionConns, questionRate} {
		from, ok := fr.Carried[q]
		if !ok || done[from] {
			continue
		}
		done[from] = true
		var qs []string
		for _, q2 := range []string{questionSweep, questionConns, questionRate} {
			if f, ok := fr.Carried[q2]; ok && f == from {
				qs = append(qs, q2)
			}
		}
		notes = append(notes, "The rows of "+strings.Join(qs, " and ")+" come from an earlier run of this benchmark ("+
			from+"); the headline's from the run described above.")
	}
	return strings.Join(notes, " ")
}
