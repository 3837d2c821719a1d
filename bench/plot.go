package main

import (
	"fmt"
	"math"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plot draws the figures of docs/benchmarks.md, one per question, each a box plot on a
// log scale whose ticks are labelled down to 0.01 ms.
func (res results) plot(dir string) error {
	figures := []struct {
		file, title string
		keep        func(result) bool
	}{
		{"benchmarks-cycle.png", "Uncontended lock + unlock, by placement", func(r result) bool {
			return r.Placement != "" && !strings.Contains(r.Kind, "handoff")
		}},
		{"benchmarks-handoff.png", "Contended handoff (waiter already queued), by placement", func(r result) bool {
			return r.Placement != "" && strings.Contains(r.Kind, "handoff")
		}},
		{"benchmarks-loss.png", "Loss detection: pg_terminate_backend → holder told", func(r result) bool {
			return strings.Contains(r.Name, "loss")
		}},
		{"benchmarks-takeover.png", "Takeover: holder killed → waiter holds the lock", func(r result) bool {
			return strings.Contains(r.Name, "takeover")
		}},
	}
	for _, f := range figures {
		if err := res.boxes(filepath.Join(dir, f.file), f.title, f.keep); err != nil {
			return err
		}
	}
	return nil
}

// short makes a row name fit under an axis.
func short(name string) string {
	return strings.NewReplacer(
		"raw pgx cycle, Background ctx", "raw pgx\nBackground",
		"raw pgx cycle, cancellable ctx", "raw pgx\ncancellable",
		"advisory Lock + Unlock, cancellable ctx", "Lock\ncancellable",
		"advisory Session Lock + Unlock", "Session\nLock",
		"advisory Lock + Unlock", "Lock",
		"advisory TryLock + Unlock", "TryLock",
		"advisory local handoff (waiter in the same Manager)", "advisory\nlocal handoff",
		"lease table (INSERT … ON CONFLICT … WHERE expired)", "lease INSERT",
		"lease table (UPDATE … WHERE owner OR expired)", "lease UPDATE",
		" (waiter in pg_advisory_lock)", "", " (polls every 5 s)", "", " (polls every 1 s)", "",
		" (WaitForNotification after pg_terminate_backend)", "", " (Done after pg_terminate_backend)", "",
		" · ", "\n", "advisory ", "advisory\n", ": ", "\n").Replace(name)
}

// ticks labels a log axis 1-2-5 per decade, so values down to 0.01 ms can be read.
type ticks struct{}

func (ticks) Ticks(lo, hi float64) []plot.Tick {
	var out []plot.Tick
	for e := math.Floor(math.Log10(lo)); math.Pow(10, e) <= hi*10; e++ {
		for _, m := range []float64{1, 2, 5} {
			v := m * math.Pow(10, e)
			if v < lo || v > hi {
				continue
			}
			out = append(out, plot.Tick{Value: v, Label: fmt.Sprintf("%g", v)})
		}
	}
	return out
}

func (res results) boxes(path, title string, keep func(result) bool) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = ticks{}
	var names []string
	w := vg.Points(18)
	lo, hi := math.Inf(1), 0.0
	for _, r := range res.Rows {
		if !keep(r) {
			continue
		}
		vals := make(plotter.Values, len(r.Samples))
		for i, v := range r.Samples {
			vals[i] = max(v, 0.001)
			lo, hi = min(lo, vals[i]), max(hi, vals[i])
		}
		b, err := plotter.NewBoxPlot(w, float64(len(names)), vals)
		if err != nil {
			return err
		}
		p.Add(b)
		names = append(names, short(r.Name))
	}
	if len(names) == 0 {
		return nil // no row of this figure was measured (-only)
	}
	// Whole 1-2-5 steps around the data, so the axis has labelled ticks at both ends.
	p.Y.Min, p.Y.Max = math.Pow(10, math.Floor(math.Log10(lo))), math.Pow(10, math.Ceil(math.Log10(hi)))
	p.NominalX(names...)
	return p.Save(vg.Length(80*len(names))+vg.Points(100), 6*vg.Inch, path)
}
