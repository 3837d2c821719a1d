package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestMain lets the test binary serve as a fleet replica, as the bench binary does
// (fleet_child.go), so that the side-by-side fleet can start it.
func TestMain(m *testing.M) {
	if os.Getenv(roleEnv) == "fleet" {
		os.Exit(runFleetChild())
	}
	os.Exit(m.Run())
}

func TestParseMix(t *testing.T) {
	gs, err := parseMix("advisory, advisory LockKey,raw@" + os.Args[0])
	if err != nil {
		t.Fatal(err)
	}
	want := []mixGroup{{impl: "advisory"}, {impl: implKey}, {impl: "raw", bin: os.Args[0]}}
	if len(gs) != len(want) {
		t.Fatalf("groups %v, want %v", gs, want)
	}
	for i := range want {
		if gs[i] != want[i] {
			t.Fatalf("groups %v, want %v", gs, want)
		}
	}
	for _, bad := range []string{"advisory", "advisory,pgx", "raw,raw@/nonexistent/bench"} {
		if _, err := parseMix(bad); err == nil {
			t.Errorf("parseMix(%q): no error", bad)
		}
	}
}

// TestFleetMixRunsGroupsSideBySide runs a small side-by-side fleet on a real server: every
// group takes locks in every window, on names of its own, and the summary gives each
// group's ratio to the first.
func TestFleetMixRunsGroupsSideBySide(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a server and replica processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cfg := fleetConfig{procs: 4, goroutines: 4, names: 20, duration: time.Second, warmup: 500 * time.Millisecond}
	mc := mixConfig{groups: []mixGroup{{impl: "advisory"}, {impl: "raw"}}, runs: 2, hot: true}
	if err := runFleetMix(ctx, cfg, mc, self, &out); err != nil {
		t.Fatalf("%v\n%s", err, out.String())
	}
	t.Log(out.String())
	runs := regexp.MustCompile(`(?m)^run \d: advisory (\d+) locks/s, client \d+ µs/lock, 1\.000x; raw (\d+) locks/s`).
		FindAllStringSubmatch(out.String(), -1)
	if len(runs) != 2 {
		t.Fatalf("want 2 runs, each group's locks/s:\n%s", out.String())
	}
	for _, r := range runs {
		for _, n := range r[1:] {
			if v, _ := strconv.Atoi(n); v == 0 {
				t.Fatalf("a group took no lock: %q", r[0])
			}
		}
	}
	if !regexp.MustCompile(`(?m)^raw / advisory: locks/s median \d+\.\d+x`).MatchString(out.String()) {
		t.Fatalf("no summary of raw against advisory:\n%s", out.String())
	}
}

// A replica's names carry its spec's prefix (the side-by-side groups' names are
// disjoint), and "fleet" without one.
func TestPickNameTakesThePrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range []struct{ prefix, want string }{{"", "fleet/"}, {"mix1", "mix1/"}} {
		for range 100 {
			spec := childSpec{Names: 10, Hot: true, Prefix: c.prefix}
			if got := pickName(rng, spec); !strings.HasPrefix(got, c.want) || strings.Count(got, "/") != 1 {
				t.Fatalf("pickName with prefix %q: %q", c.prefix, got)
			}
		}
	}
}
