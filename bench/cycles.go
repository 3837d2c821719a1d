package main

import (
	"context"
	"fmt"
	"runtime"
	"runtime/metrics"
	"sort"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pgadvisory/advisory"
)

// The uncontended cycles: two floors (raw pgx on a plain connection, with
// context.Background and with a cancellable ctx, as real callers pass) and ours, each
// one lock and one unlock of an uncontended key. Each is measured in every placement.
type cycleKind struct {
	name   string
	floor  bool
	cancel bool // compared with the cancellable-ctx floor first
	op     func(b *bench) error
}

const (
	floorBackground = "raw pgx cycle, Background ctx"
	floorCancel     = "raw pgx cycle, cancellable ctx"
	handoffFloor    = "raw handoff (waiter in pg_advisory_lock)"
	handoffOurs     = "advisory contended handoff"
	handoffLocal    = "advisory local handoff (waiter in the same Manager)"
)

func cycleKinds() []cycleKind {
	return []cycleKind{
		{name: floorBackground, floor: true, op: func(b *bench) error { return rawCycle(context.Background(), b.cycleRaw[0], rawCycleKey) }},
		{name: floorCancel, floor: true, op: func(b *bench) error { return rawCycle(b.cancellable, b.cycleRaw[1], rawCycleKey) }},
		{name: "advisory Lock + Unlock", op: func(b *bench) error { return lockCycle(context.Background(), b.cycles[0], "bench/cycle") }},
		{name: "advisory Lock + Unlock, cancellable ctx", cancel: true, op: func(b *bench) error { return lockCycle(b.cancellable, b.cycles[1], "bench/cycle") }},
		{name: "advisory TryLock + Unlock", op: func(b *bench) error { return tryCycle(context.Background(), b.cycles[2], "bench/cycle") }},
		{name: "advisory Session Lock + Unlock", op: sessionCycle},
	}
}

// cycleDraws is how many times a round opens the unpinned cycles' connections again.
const cycleDraws = 4

// at names a row measured in a placement.
func at(name string, pl placement) string { return name + " · " + pl.Name }

// placedRows returns the cycle and handoff rows of every placement, grouped by placement
// so that an interleaved pass moves threads only a few times.
func placedRows(pls []placement) []*row {
	var rows []*row
	for _, pl := range pls {
		for _, k := range cycleKinds() {
			op := k.op
			// Unpinned, as the outside harness of issue 24: 3,000 samples in 5 rounds, of
			// cycleDraws draws each (see bench.redraw).
			per := map[bool]int{true: 600 / cycleDraws, false: 200}[pl.client == nil]
			r := &row{Name: at(k.name, pl), Kind: k.name, Placement: pl.Name, Unit: "ms", per: per,
				sample: func(_ context.Context, b *bench) (float64, error) { return timed(func() error { return op(b) }) },
				op:     op}
			if k.floor {
				r.Group = "floor"
			} else {
				r.Group, r.Target = "advisory", target(pl, 1.10)
				r.Floor, r.Floor2 = at(floorBackground, pl), at(floorCancel, pl)
				if k.cancel {
					r.Floor, r.Floor2 = r.Floor2, r.Floor
				}
			}
			rows = append(rows, r)
		}
		rows = append(rows,
			&row{Name: at(handoffFloor, pl), Kind: handoffFloor, Placement: pl.Name, Group: "floor", Unit: "ms", per: 20, sample: rawHandoff},
			&row{Name: at(handoffOurs, pl), Kind: handoffOurs, Placement: pl.Name, Group: "advisory", Unit: "ms", per: 20,
				Floor: at(handoffFloor, pl), Target: target(pl, 1.20), sample: oursHandoff},
			&row{Name: at(handoffLocal, pl), Kind: handoffLocal, Placement: pl.Name, Group: "advisory", Unit: "ms", per: 20,
				Floor: at(handoffFloor, pl), Target: target(pl, 1.20), sample: localHandoff})
	}
	return rows
}

// target is the ratio target: unpinned as given, pinned rows 1.05.
func target(pl placement, unpinned float64) float64 {
	if pl.client == nil {
		return unpinned
	}
	return 1.05
}

// rawCycleKey is the floors' key: a name's, as a user's program would compute it. The
// floors send it as a parameter (see rawCycle); until issue 24 they sent a literal
// ("SELECT pg_try_advisory_lock(42)"), which no user writes.
var rawCycleKey = int64(advisory.KeyOf("bench/raw-cycle"))

func sessionCycle(b *bench) error {
	ctx := context.Background()
	if err := b.session.Lock(ctx, "bench/session-cycle"); err != nil {
		return err
	}
	return b.session.Unlock(ctx, "bench/session-cycle")
}

// counts are per-cycle figures that machine load changes far less than it changes
// latency: context switches of the whole client process (all its threads, voluntary and
// involuntary), goroutines started, heap allocations, and the client's CPU time (user and
// system, all threads, in µs; it includes the Go scheduler's spinning while it waits).
type counts struct {
	CtxSwitches float64 `json:"ctx_switches"`
	Goroutines  float64 `json:"goroutines"`
	Allocs      float64 `json:"allocs"`
	CPU         float64 `json:"cpu_us"`
}

// readCounters reads the counters. Allocations come from ReadMemStats (exact; it stops
// the world, but only between blocks), not runtime/metrics, whose heap counters lag.
func readCounters() (cs, gor, allocs uint64, cpu time.Duration) {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	s := []metrics.Sample{{Name: "/sched/goroutines-created:goroutines"}}
	metrics.Read(s)
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return uint64(ru.Nvcsw + ru.Nivcsw), s[0].Value.Uint64(), ms.Mallocs, cpu
}

// countCycles runs op n times and returns the counts per cycle.
func countCycles(b *bench, op func(*bench) error, n int) (counts, error) {
	cs0, g0, a0, c0 := readCounters()
	for i := 0; i < n; i++ {
		if err := op(b); err != nil {
			return counts{}, err
		}
	}
	cs1, g1, a1, c1 := readCounters()
	f := float64(n)
	return counts{float64(cs1-cs0) / f, float64(g1-g0) / f, float64(a1-a0) / f, float64(c1-c0) / f / 1e3}, nil
}

// countRound takes one block of counts for every row that has an op, in its placement.
func countRound(b *bench, rows []*row) error {
	for _, r := range rows {
		if r.op == nil {
			continue
		}
		if err := b.placer.place(b.placementOf(r)); err != nil {
			return err
		}
		if _, err := countCycles(b, r.op, 20); err != nil { // warm up after the move
			return err
		}
		c, err := countCycles(b, r.op, 300)
		if err != nil {
			return fmt.Errorf("%s: %w", r.Name, err)
		}
		r.counts = append(r.counts, c)
	}
	return nil
}

// medianCounts takes each figure's median over the rounds.
func medianCounts(cs []counts) *counts {
	if len(cs) == 0 {
		return nil
	}
	med := func(get func(counts) float64) float64 {
		v := make([]float64, len(cs))
		for i, c := range cs {
			v[i] = get(c)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	return &counts{med(func(c counts) float64 { return c.CtxSwitches }), med(func(c counts) float64 { return c.Goroutines }),
		med(func(c counts) float64 { return c.Allocs }), med(func(c counts) float64 { return c.CPU })}
}
