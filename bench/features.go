package main

import (
	"bufio"
	"bytes"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The feature benchmarks are the library's own `go test` benchmarks that compare a
// feature with the plain call it builds on, each interleaving the two in one loop:
// fenced transactions against pgx.BeginFunc, a token's cost, hooks against none, a
// semaphore slot against a plain Lock. The bench program runs them (from the module
// root, against the test harness's server) so that their figures come from the same run
// as the rest of this report and are never typed by hand.

// featureBench is how they are run: count runs of iterations each.
const featureBench = `go test -run '^$' -bench 'FenceRatio|TokenCost|HooksOverhead|SemaphoreCycle' -benchtime 2000x -count 5 .`

// feature is one reported metric of one benchmark over the runs.
type feature struct {
	Bench  string    `json:"bench"`
	Metric string    `json:"metric"`
	Values []float64 `json:"values"`
}

// what each metric means, for the report; metrics not listed are not reported.
var featureMetrics = map[string]string{
	"x-beginfunc":  "Lock.BeginFunc (a one-UPDATE transaction) / pgx.BeginFunc on a plain connection, same ctx",
	"token-µs":     "Lock.Token's cost (µs) on the harness server (fsync off: add one WAL flush on a real disk)",
	"x-hooks":      "Lock+Unlock with counting hooks / without hooks",
	"x-acquire":    "Semaphore.Acquire+Unlock / Lock+Unlock",
	"x-tryacquire": "Semaphore.TryAcquire+Unlock / Lock+Unlock",
}

// runFeatures runs the feature benchmarks in the module at root.
func runFeatures(root string) ([]feature, error) {
	cmd := exec.Command("sh", "-c", featureBench)
	cmd.Dir = root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("%s: %w\n%s", featureBench, err, out)
	}
	return parseFeatures(out), nil
}

// parseFeatures reads `go test -bench` output: "BenchmarkX-2  N  V ns/op  V unit ...".
func parseFeatures(out []byte) []feature {
	byKey := map[[2]string]*feature{}
	var order [][2]string
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndex(name, "-"); i > 0 {
			name = name[:i]
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil || featureMetrics[f[i+1]] == "" {
				continue
			}
			k := [2]string{name, f[i+1]}
			if byKey[k] == nil {
				byKey[k] = &feature{Bench: name, Metric: f[i+1]}
				order = append(order, k)
			}
			byKey[k].Values = append(byKey[k].Values, v)
		}
	}
	out2 := make([]feature, 0, len(order))
	for _, k := range order {
		out2 = append(out2, *byKey[k])
	}
	return out2
}

// featureSection writes the feature rows: the range and median over the runs.
func (res results) featureSection(b *strings.Builder) {
	if len(res.Features) == 0 {
		return
	}
	b.WriteString("## Features against the call they build on\n\n")
	b.WriteString("Run by the same command, after the rows above (or alone with `go run . -features`):\n`" +
		featureBench + "`. Each benchmark interleaves the feature and its base per iteration and\n" +
		"reports medians; 5 runs, unpinned, on the test harness's server (fsync off).")
	if res.FeaturesLoad != "" {
		b.WriteString(" Load average when they ended: " + res.FeaturesLoad + ".")
	}
	b.WriteString("\n\n")
	b.WriteString("| benchmark | measures | median of runs | range |\n|---|---|---|---|\n")
	for _, f := range res.Features {
		v := slices.Clone(f.Values)
		slices.Sort(v)
		fmt.Fprintf(b, "| `Benchmark%s` | %s | %s | %s–%s |\n", f.Bench, featureMetrics[f.Metric],
			fmtFeature(v[len(v)/2], f.Metric), fmtFeature(v[0], f.Metric), fmtFeature(v[len(v)-1], f.Metric))
	}
	b.WriteString("\n")
}

func fmtFeature(v float64, metric string) string {
	if strings.HasPrefix(metric, "x-") {
		return fmt.Sprintf("%.2fx", v)
	}
	return fmt.Sprintf("%.0f", v)
}

// refreshFeatures runs the feature benchmarks alone, replaces them in the stored results
// and renders everything again (the other rows keep their run's figures).
func refreshFeatures(docs, readme string) error {
	res, err := loadResults(docs)
	if err != nil {
		return err
	}
	if res.Features, err = runFeatures(".."); err != nil {
		return err
	}
	res.FeaturesLoad = loadAverage()
	if err := res.writeJSON(filepath.Join(docs, "benchmarks.json")); err != nil {
		return err
	}
	return res.render(docs, readme)
}
