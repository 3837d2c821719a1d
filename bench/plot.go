package main

import (
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// plot draws the two figures of docs/benchmarks.md, both box plots on a log scale: the
// handoff and takeover latency of each system, and its uncontended lock cycle.
func (res results) plot(dir string) error {
	if err := res.boxes(filepath.Join(dir, "benchmarks-handoff.png"), "Handoff latency (waiter already queued)",
		func(r result) bool {
			return strings.Contains(r.Name, "handoff") || strings.Contains(r.Name, "takeover")
		}); err != nil {
		return err
	}
	return res.boxes(filepath.Join(dir, "benchmarks-cycle.png"), "Uncontended lock + unlock",
		func(r result) bool {
			return strings.Contains(r.Name, "lock + unlock") || strings.Contains(r.Name, "Lock + Unlock") ||
				strings.HasPrefix(r.Name, "REF")
		})
}

// short makes a row name fit under an axis.
func short(name string) string {
	name = strings.NewReplacer("REF: raw pg_try_advisory_lock + pg_advisory_unlock", "raw REF",
		"lease table (INSERT … ON CONFLICT … WHERE expired)", "lease INSERT",
		"lease table (UPDATE … WHERE owner OR expired)", "lease UPDATE",
		" (waiter in pg_advisory_lock)", "", " (polls every 5 s)", "", " (polls every 1 s)", "",
		"advisory ", "advisory\n", ": ", "\n").Replace(name)
	return name
}

func (res results) boxes(path, title string, keep func(result) bool) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = "ms (log scale)"
	p.Y.Scale = plot.LogScale{}
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	var names []string
	w := vg.Points(18)
	for _, r := range res.Rows {
		if !keep(r) {
			continue
		}
		vals := make(plotter.Values, len(r.Samples))
		for i, v := range r.Samples {
			vals[i] = max(v, 0.001)
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
	p.NominalX(names...)
	return p.Save(vg.Length(110*len(names))+vg.Points(80), 6*vg.Inch, path)
}
