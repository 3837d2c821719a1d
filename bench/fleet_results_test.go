package main

import (
	"strings"
	"testing"
)

// A question carried over twice keeps the run that measured it, and one measured in
// between names its own run.
func TestCarryOverKeepsTheRunThatMeasured(t *testing.T) {
	dir := t.TempDir()
	pt := []fleetPoint{{Impl: "raw", Skew: "uniform", Locks: 1}}
	first := fleetResults{Main: pt, Sweep: pt, Conns: pt, Took: "run 1", Load: "l1"}
	if err := first.write(dir); err != nil {
		t.Fatal(err)
	}
	second := fleetResults{Main: pt, Conns: pt, Took: "run 2", Load: "l2"}
	second.carryOver(fleetConfig{docs: dir, sweep: false, conns: true})
	if err := second.write(dir); err != nil {
		t.Fatal(err)
	}
	third := fleetResults{Main: pt, Took: "run 3", Load: "l3"}
	third.carryOver(fleetConfig{docs: dir})
	if len(third.Sweep) != 1 || len(third.Conns) != 1 || len(third.Rate) != 0 {
		t.Fatalf("rows kept: sweep %d, conns %d, rate %d; want 1, 1, 0", len(third.Sweep), len(third.Conns), len(third.Rate))
	}
	if got := third.Carried[questionSweep]; got != "run 1, load l1" {
		t.Errorf("the sweep is said to come from %q, want run 1", got)
	}
	if got := third.Carried[questionConns]; got != "run 2, load l2" {
		t.Errorf("the connections question is said to come from %q, want run 2", got)
	}
	note := third.carriedNote()
	if !strings.Contains(note, "The rows of the sweep come from an earlier run of this benchmark (run 1, load l1)") ||
		!strings.Contains(note, "The rows of the connections question come from an earlier run of this benchmark (run 2, load l2)") {
		t.Errorf("note: %s", note)
	}
}
