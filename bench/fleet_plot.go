package main

import (
	"image/color"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The fleet's figures, one per question: throughput, acquire latency, connections,
// server memory, CPU per lock, how the cost grows (processes, goroutines, names), and
// what fewer connections than callers do to throughput.

var implColor = map[string]color.Color{
	"advisory": color.RGBA{R: 31, G: 119, B: 180, A: 255},
	"raw":      color.RGBA{R: 255, G: 127, B: 14, A: 255},
	implKey:    color.RGBA{R: 44, G: 160, B: 44, A: 255},
}

func (fr fleetResults) plot(dir string) error {
	main := func(get func(fleetPoint) float64) map[string][]float64 {
		out := map[string][]float64{}
		for _, p := range fr.headline() {
			out[p.Impl] = append(out[p.Impl], get(p))
		}
		return out
	}
	skews := []string{"uniform", "hot 90/10"}
	bars := []struct {
		file, title, y string
		groups         []string
		series         map[string][]float64
	}{
		{"benchmarks-fleet-throughput.png", "Fleet throughput", "locks/s", skews, main(func(p fleetPoint) float64 { return p.LocksPerSec })},
		{"benchmarks-fleet-latency.png", "Fleet acquire latency: p50 (left), p99 (right)", "ms", []string{"uniform p50", "hot p50", "uniform p99", "hot p99"},
			concatSeries(main(func(p fleetPoint) float64 { return p.P50 }), main(func(p fleetPoint) float64 { return p.P99 }))},
		{"benchmarks-fleet-connections.png", "Server connections: open (left), not idle, mean (right)", "connections",
			[]string{"uniform open", "hot open", "uniform busy", "hot busy"},
			concatSeries(main(func(p fleetPoint) float64 { return float64(p.PeakConns) }), main(func(p fleetPoint) float64 { return p.MeanActive }))},
		{"benchmarks-fleet-memory.png", "Server memory added by the fleet (PSS)", "MB", skews, main(func(p fleetPoint) float64 { return p.ServerMemAdd })},
		{"benchmarks-fleet-cpu.png", "CPU per lock: client (left), server (right)", "µs per lock",
			[]string{"uniform client", "hot client", "uniform server", "hot server"},
			concatSeries(main(func(p fleetPoint) float64 { return p.ClientCPU }), main(func(p fleetPoint) float64 { return p.ServerCPU }))},
	}
	for _, b := range bars {
		if err := barChart(filepath.Join(dir, b.file), b.title, b.y, b.groups, b.series); err != nil {
			return err
		}
	}
	if err := fr.plotConns(dir); err != nil {
		return err
	}
	return fr.plotSweeps(dir)
}

func concatSeries(a, b map[string][]float64) map[string][]float64 {
	out := map[string][]float64{}
	for k, v := range a {
		out[k] = append(append([]float64(nil), v...), b[k]...)
	}
	return out
}

func (fr fleetResults) plotSweeps(dir string) error {
	cost := func(p fleetPoint) float64 { return p.ClientCPU + p.ServerCPU }
	lines := []struct {
		file, title, x, y string
		dim               string
		get               func(fleetPoint) float64
	}{
		{"benchmarks-fleet-scaling-procs.png", "CPU per lock (client + server) by replicas", "replica processes", "µs per lock", "procs", cost},
		{"benchmarks-fleet-scaling-goroutines.png", "CPU per lock (client + server) by goroutines per replica", "goroutines per replica", "µs per lock", "goroutines", cost},
		{"benchmarks-fleet-scaling-names.png", "CPU per lock (client + server) by lock names", "names (log scale)", "µs per lock", "names", cost},
		{"benchmarks-fleet-scaling-conns.png", "Throughput by pool size per replica (hot 90/10)", "connections per replica", "locks/s", "conns",
			func(p fleetPoint) float64 { return p.LocksPerSec }},
	}
	for _, l := range lines {
		series := fr.sweepSeries(l.dim, l.get)
		if len(series) == 0 {
			continue
		}
		if err := linePlot(filepath.Join(dir, l.file), l.title, l.x, l.y, l.dim == "names", series); err != nil {
			return err
		}
	}
	return nil
}

func barChart(path, title, ylabel string, groups []string, series map[string][]float64) error {
	p := plot.New()
	p.Title.Text = title
	p.Y.Label.Text = ylabel
	w := vg.Points(20)
	for i, impl := range fleetImpls {
		vals := series[impl]
		if len(vals) == 0 {
			continue
		}
		b, err := plotter.NewBarChart(plotter.Values(vals), w)
		if err != nil {
			return err
		}
		b.Color = implColor[impl]
		b.LineStyle.Width = 0
		b.Offset = vg.Length(float64(i)-1) * w
		p.Add(b)
		p.Legend.Add(impl, b)
	}
	top := 0.0
	for _, vals := range series {
		for _, v := range vals {
			top = max(top, v)
		}
	}
	p.Y.Min, p.Y.Max = 0, top*1.35 // room for the legend above the bars
	p.Legend.Top = true
	p.NominalX(groups...)
	return p.Save(vg.Length(130*len(groups))+vg.Points(120), 4*vg.Inch, path)
}

func linePlot(path, title, xlabel, ylabel string, logX bool, series map[string]plotter.XYs) error {
	p := plot.New()
	p.Title.Text = title
	p.X.Label.Text, p.Y.Label.Text = xlabel, ylabel
	if logX {
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{}
	}
	p.Y.Min = 0
	for _, impl := range []string{"advisory", "raw"} {
		xys := series[impl]
		if len(xys) == 0 {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xys)
		if err != nil {
			return err
		}
		l.Color, pts.Color = implColor[impl], implColor[impl]
		p.Add(l, pts)
		p.Legend.Add(impl, l, pts)
	}
	p.Legend.Top = true
	return p.Save(6*vg.Inch, 4*vg.Inch, path)
}
