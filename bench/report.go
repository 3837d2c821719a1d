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
	// Probe is the outside harness of issue 24 (probe.go), run in a child process.
	Probe *probeResult `json:"probe,omitempty"`
	// ProbeDraws is the same harness over many draws of its connections (shuffled order).
	ProbeDraws *probeResult `json:"probe_draws,omitempty"`
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
	// DrawRatios are the row's median over its floor's in each draw of their
	// connections (bench.redraw), for the rows measured over draws.
	DrawRatios []float64 `json:"draw_ratios,omitempty"`
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
	draws := map[string][]float64{}
	out := make([]result, 0, len(rows))
	for _, r := range rows {
		draws[r.Name] = r.drawMedians
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
		if d, f := draws[r.Name], draws[r.Floor]; len(d) > 1 && len(d) == len(f) {
			for j := range d {
				r.DrawRatios = append(r.DrawRatios, d[j]/f[j])
			}
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
that one command: nothing here is typed into this file by hand. The notes between the
tables are written in the command's sources (` + "`bench/*notes*.go`" + `), and the bench
module's TestRenderReproducesTheDocs fails while this file differs from what
` + "`go run . -render`" + ` writes from the JSON files beside it.

Reproduce (starts its own throwaway PostgreSQL; run it as root, or as a user allowed to
move the server's processes between CPUs, on an idle machine):

` + "```sh\n" + reproduce + "\n```\n\n")
	fmt.Fprintf(&b, "Machine: %s. Load average (1, 5, 15 min) at start → end: %s. %d interleaved rounds; run took %s.\n\n",
		res.Machine, res.Load, res.Rounds, res.Took)
	res.cycleSection(&b)
	res.probeSection(&b)
	res.handoffSection(&b)
	b.WriteString("## Loss detection and takeover\n\n![Loss detection](benchmarks-loss.png)\n\n![Takeover](benchmarks-takeover.png)\n\n")
	for _, g := range []struct{ group, title string }{
		{"floor", "Other floors"}, {"advisory", "Other advisory rows"}, {"scale", "Scale"}, {"peer", "Peers"}} {
		res.groupTable(&b, g.group, g.title)
	}
	res.featureSection(&b)
	if fr, ok := loadFleet(filepath.Dir(path)); ok {
		fr.markdown(&b)
		fr.findings(&b)
	}
	b.WriteString(mixNotes)
	b.WriteString(statementsNotes)
	b.WriteString(pooledNotes)
	b.WriteString(sharedNotes)
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
		"goroutines started, heap allocations, client CPU time (µs, all threads, user + system). " +
		"Unpinned, every round opens the cycles' connections again several times (new backends, placed afresh: " +
		"see \"Why two harnesses' floors disagreed\"); *per draw* is the median, then the range, of the rows' " +
		"ratios within each draw.\n\n| cycle |")
	for _, p := range pls {
		fmt.Fprintf(b, " %s |", p)
	}
	b.WriteString(" per draw, " + pls[0] + " | ctx switches | goroutines | allocs | CPU µs |\n|---|")
	b.WriteString(strings.Repeat("---|", len(pls)+5) + "\n")
	for _, k := range res.kinds(func(r result) bool { return r.Counts != nil || strings.Contains(r.Kind, "cycle") }) {
		fmt.Fprintf(b, "| %s |", k)
		for _, p := range pls {
			if r := res.find(k, p); r != nil {
				fmt.Fprintf(b, " %s%s%s |", fmtVal(r.Median, r.Unit), ratioText(r), metText(r))
			} else {
				b.WriteString(" |")
			}
		}
		b.WriteString(" " + drawText(res.find(k, pls[0])) + " |")
		if r := res.find(k, pls[0]); r != nil && r.Counts != nil {
			c := r.Counts
			fmt.Fprintf(b, " %.2f | %.2f | %.1f | %.0f |\n", c.CtxSwitches, c.Goroutines, c.Allocs, c.CPU)
		} else {
			b.WriteString(" | | | |\n")
		}
	}
	b.WriteString("\n" + cycleNotes)
}

// drawText is a row's per-draw ratios: their median, then their range ("" for none).
func drawText(r *result) string {
	if r == nil {
		return ""
	}
	return drawRatiosText(r.DrawRatios)
}

func drawRatiosText(v []float64) string {
	if len(v) == 0 {
		return ""
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return fmt.Sprintf("%.2fx (%.2f-%.2fx, %d draws)", quantile(s, 0.5), s[0], s[len(s)-1], len(s))
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
		"The waiter in another Manager (another process's, as far as the lock is concerned), or in the holder's own.\n\n" +
		"| placement | raw (waiter in pg_advisory_lock) | advisory, waiter in another Manager | ratio | advisory, waiter in the same Manager | ratio |\n|---|---|---|---|---|---|\n")
	for _, p := range pls {
		raw, ours, local := res.find(handoffFloor, p), res.find(handoffOurs, p), res.find(handoffLocal, p)
		if raw == nil || ours == nil {
			continue
		}
		fmt.Fprintf(b, "| %s | %s | %s | %.2fx%s |", p, fmtVal(raw.Median, raw.Unit), fmtVal(ours.Median, ours.Unit), ours.Ratio, metText(ours))
		if local != nil {
			fmt.Fprintf(b, " %s | %.2fx%s |\n", fmtVal(local.Median, local.Unit), local.Ratio, metText(local))
		} else {
			b.WriteString(" | |\n")
		}
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
