package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
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
	if fr, ok := loadFleet(filepath.Dir(path)); ok {
		fr.markdown(&b)
		b.WriteString(fleetNotes)
	}
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

// fleetNotes read the fleet's tables (measured on the 2-CPU machine of the run above).
const fleetNotes = `FLEET NOTES PLACEHOLDER

`

const notes = `## Where a cycle's time goes

Counted per cycle (strace -c and perf on the client alone, with the server started
separately; the goroutine and allocation columns above):

- **Thread wake-ups**: the same as raw pgx. perf's sched_wakeup events over 20,000
  cycles (root package, ` + "`ADVISORY_BENCH_LAYER=raw|lock`" + ` with ` + "`-bench CycleAblation`" + `,
  call graphs): raw 1.79 per cycle, Lock + Unlock 1.86. The largest source in both is
  pgx itself: every statement resets a 15 ms "slow write" timer, and adding a timer while
  no thread waits in the network poller makes the runtime wake an idle thread (0.74 per
  cycle raw, 0.90 ours). No goroutine is started and no thread of ours is woken for a
  cycle: the loss watcher is an epoll registration, not a goroutine.
- **System calls**: exactly three more than raw pgx: epoll_ctl ADD when the lock is held
  and DEL before the unlock statement (the loss watcher), and one recvfrom(MSG_PEEK) when
  the pool hands out a connection (an idle connection whose backend was terminated
  already holds the FATAL; the peek finds it before a Lock meets it). Switching the
  watcher off altogether (an experiment, not an option) moved Lock + Unlock by 0.01x to
  0.04x; keeping one registration per connection and arming and disarming it with
  EPOLL_CTL_MOD instead measured no difference in two paired runs, so the simpler ADD/DEL
  stays. A registration that stayed armed would wake the watcher on every reply; one
  watching only for a hang-up would hear of a termination after the server has freed the
  lock (the FATAL comes first, the FIN after the release), so the holder would no longer
  be told first.
- **Server work**: on a connection proven direct (the backend sees our socket's own two
  ends; see docs/guarantees.md) the lock statements are the bare pg_advisory_* calls with
  one parameter, as raw pgx sends. Through a proxy or a Unix socket every lock statement
  also checks the connection's ownership token and returns pg_backend_pid(): measured
  interleaved on one plain connection, 3000 iterations, that check alone costs the server
  1.07-1.08x of a raw cycle (the token's current_setting and text parameter 1.07x, the pid
  column 1.02x).
- **Allocations**: 11 per Lock or TryLock cycle (44 and 47 before issue 14, 19 before
  the statement-text cache and the peek on the setup's descriptor), 16 per Session
  Lock + Unlock (38 before its unlock bound became a socket deadline). Raw pgx makes 9
  to 12 for its own two statements, which ours include.
- **CPU work**: pool Acquire + Release about 1.3 µs (BenchmarkPoolAcquireRelease); the
  rest of the library's code is spread thin (no function of the library above 0.3 % of
  the client's CPU in perf profiles).

Compare a row across the placement columns: a gap that is the same in every placement is
work on the cycle's path, not where the threads ran. In the root package,
` + "`go test -run '^$' -bench CycleAblation -benchtime 3000x -count 4`" + ` (on an idle machine)
splits a Lock + Unlock cycle into layers, each timed side by side with the raw floor:
the raw statements on our pool connection (our session settings), those plus pool
Acquire and Release, the whole cycle (plus the pinned-session bookkeeping, the in-process
queue and the epoll registration), and, apart, the checked statement texts that a
proxied connection sends. Timings taken while other jobs load the machine mean little:
the load average at the start and the end of the run is printed above. On this 2-CPU
VM a 5-round run of the same code moves a ratio by up to 0.03x unpinned and 0.05x on one
core: read a single ❌ or ✅ near its target with that in mind.

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
  each statement. **advisory Lock + Unlock** adds the pool (and its liveness peek), the
  in-process queue, the pinned-session bookkeeping and the loss watcher (an epoll
  registration); the benchmark's connections go straight to the server over loopback
  TCP, so its lock statements are the bare functions (see above for what a proxied
  connection adds). **Session Lock + Unlock** takes and releases one lock on a Session's
  connection, held open.
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
