package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime/pprof"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The cycle probe is the outside harness of issue 24 written down: a plain pgx.Conn
// running `select pg_try_advisory_lock($1)` and `select pg_advisory_unlock($1)`,
// interleaved row by row with m.Lock+Unlock and m.TryLock+Unlock on one Manager made
// with New's defaults, warm-ups first, then medians. Nothing else runs in the process:
// no other pools, no placement moves, no untimed run before each sample. It is the
// check on the main bench's cycle rows (cycles.go), which must agree with it.

// probeConfig is what -probe's flags set.
type probeConfig struct {
	samples, warmups int
	variants         bool   // also time the floor's variants (see probeRows)
	shuffle          bool   // shuffle the row order in every round (else fixed, as the outside harness)
	profile          string // write a CPU profile of the timed rounds here ("": none)
	only             string // time only the raw floor and this row's op ("": all rows)
	histogram        bool   // print each row's spread
	warm             bool   // before each timed sample, one untimed run of the same row (the main bench's way until issue 24)
	placement        string // a placement's name (placements()); "" or "unpinned": none
	cpu              bool   // measure CPU per cycle instead (probe_cpu.go)
}

type probeRow struct {
	name string
	op   func(ctx context.Context) error
	vals []float64
}

// probeRows returns the outside harness's three rows and, with variants, the forms of the
// floor that the main bench used before issue 24 (a literal key; two statements that are
// each prepared once), so a run shows which difference moves the floor.
func probeRows(raw *pgx.Conn, m *advisory.Manager, variants bool) []*probeRow {
	key := int64(advisory.KeyOf("probe/raw"))
	rows := []*probeRow{
		{name: "raw pgx (pg_try_advisory_lock($1), pg_advisory_unlock($1))", op: func(ctx context.Context) error {
			return rawCycle(ctx, raw, key)
		}},
		{name: "advisory Lock + Unlock", op: func(ctx context.Context) error { return lockCycle(ctx, m, "probe/lock") }},
		{name: "advisory TryLock + Unlock", op: func(ctx context.Context) error { return tryCycle(ctx, m, "probe/try") }},
	}
	if variants {
		rows = append(rows, &probeRow{name: "raw pgx, literal key (the old bench floor)", op: func(ctx context.Context) error {
			var ok bool
			if err := raw.QueryRow(ctx, "SELECT pg_try_advisory_lock(43)").Scan(&ok); err != nil || !ok {
				return fmt.Errorf("try lock: %v %v", ok, err)
			}
			return raw.QueryRow(ctx, "SELECT pg_advisory_unlock(43)").Scan(&ok)
		}})
	}
	return rows
}

// rawCycle is the floor: what a user's program sends on a plain connection to take and
// release a lock it does not wait for.
func rawCycle(ctx context.Context, c *pgx.Conn, key int64) error {
	var ok bool
	if err := c.QueryRow(ctx, "select pg_try_advisory_lock($1)", key).Scan(&ok); err != nil || !ok {
		return fmt.Errorf("try lock: %v %v", ok, err)
	}
	return c.QueryRow(ctx, "select pg_advisory_unlock($1)", key).Scan(&ok)
}

func lockCycle(ctx context.Context, m *advisory.Manager, name string) error {
	l, err := m.Lock(ctx, name)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

func tryCycle(ctx context.Context, m *advisory.Manager, name string) error {
	l, err := m.TryLock(ctx, name)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// runProbe starts a server (the harness's), runs the probe and prints its medians.
func runProbe(ctx context.Context, cfg probeConfig, out io.Writer) error {
	srv, err := pgtest.Start(ctx)
	if err != nil {
		return err
	}
	defer srv.Close()
	_, err = probeOn(ctx, cfg, srv.DSN(), out)
	return err
}

// probeResult is a probe run as benchmarks.json keeps it.
type probeResult struct {
	Samples int              `json:"samples"`
	Warmups int              `json:"warmups"`
	Load    string           `json:"load"`
	Rows    []probeRowResult `json:"rows"`
}

type probeRowResult struct {
	Name   string  `json:"name"`
	Median float64 `json:"median_us"`
	P90    float64 `json:"p90_us"`
	Ratio  float64 `json:"ratio"` // to the first row, the raw floor
}

// probeOn runs the probe against dsn's server, prints it to out and returns it.
func probeOn(ctx context.Context, cfg probeConfig, dsn string, out io.Writer) (probeResult, error) {
	res := probeResult{Samples: cfg.samples, Warmups: cfg.warmups}
	raw, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return res, err
	}
	defer raw.Close(context.Background())
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		return res, err
	}
	defer m.Close()
	rows := probeRows(raw, m, cfg.variants)
	if cfg.only != "" {
		rows = keepProbeRows(rows, cfg.only)
	}
	if cfg.placement != "" && cfg.placement != "unpinned" {
		if err := placeProbe(ctx, raw, cfg.placement); err != nil {
			return res, err
		}
	}
	load := loadAverage()
	if err := probeRounds(ctx, rows, cfg.warmups, false, false, false); err != nil {
		return res, err
	}
	if cfg.cpu {
		return res, probeCPU(ctx, out, rows, func(i int) (int, error) { return backendOf(ctx, raw, m, i) }, 10, 500)
	}
	if cfg.profile != "" {
		f, err := os.Create(cfg.profile)
		if err != nil {
			return res, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return res, err
		}
		defer pprof.StopCPUProfile()
	}
	if err := probeRounds(ctx, rows, cfg.samples, true, cfg.shuffle, cfg.warm); err != nil {
		return res, err
	}
	pl := cfg.placement
	if pl == "" {
		pl = "unpinned"
	}
	fmt.Fprintf(out, "cycle probe: %d samples per row after %d warm-ups, interleaved row by row (%s order%s), %s; load average %s → %s\n",
		cfg.samples, cfg.warmups, map[bool]string{true: "shuffled", false: "fixed"}[cfg.shuffle],
		map[bool]string{true: ", each sample after an untimed run of its row", false: ""}[cfg.warm], pl, load, loadAverage())
	res.Load = load + " → " + loadAverage()
	floor := median(rows[0].vals)
	for _, r := range rows {
		rr := probeRowResult{Name: r.name, Median: median(r.vals), P90: quantileOf(r.vals, 0.9), Ratio: median(r.vals) / floor}
		res.Rows = append(res.Rows, rr)
		fmt.Fprintf(out, "  %-62s median %7.1f µs  p90 %7.1f µs  %.2fx\n", rr.Name, rr.Median, rr.P90, rr.Ratio)
		if cfg.histogram {
			histogram(out, r.vals, 10)
		}
	}
	return res, nil
}

// keepProbeRows keeps the floor and the row named name.
func keepProbeRows(rows []*probeRow, name string) []*probeRow {
	out := rows[:1]
	for _, r := range rows[1:] {
		if r.name == name {
			out = append(out, r)
		}
	}
	return out
}

// probeRounds runs n rounds, each one sample of every row; timed keeps the samples (µs).
func probeRounds(ctx context.Context, rows []*probeRow, n int, timed, shuffle, warm bool) error {
	order := make([]int, len(rows))
	for i := range order {
		order[i] = i
	}
	for i := 0; i < n; i++ {
		if shuffle {
			rand.Shuffle(len(order), func(a, b int) { order[a], order[b] = order[b], order[a] })
		}
		for _, j := range order {
			r := rows[j]
			if warm {
				if err := r.op(ctx); err != nil {
					return fmt.Errorf("%s: %w", r.name, err)
				}
			}
			start := time.Now()
			if err := r.op(ctx); err != nil {
				return fmt.Errorf("%s: %w", r.name, err)
			}
			if timed {
				r.vals = append(r.vals, float64(time.Since(start))/float64(time.Microsecond))
			}
		}
	}
	return nil
}

func median(v []float64) float64 { return quantileOf(v, 0.5) }

func quantileOf(v []float64, q float64) float64 {
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	return quantile(s, q)
}

// histogram prints how a row's samples spread, in buckets of width µs (debugging aid).
func histogram(out io.Writer, vals []float64, width float64) {
	counts := map[int]int{}
	for _, v := range vals {
		counts[int(v/width)]++
	}
	for b := 0; b < 40; b++ {
		if c := counts[b]; c > len(vals)/100 {
			fmt.Fprintf(out, "    %4.0f-%4.0f µs %5d\n", float64(b)*width, float64(b+1)*width, c)
		}
	}
}

// placeProbe moves the probe's threads and the server's processes to the named placement.
func placeProbe(ctx context.Context, c *pgx.Conn, name string) error {
	p, err := newPlacer(ctx, c)
	if err != nil {
		return err
	}
	for _, pl := range placements() {
		if pl.Name == name {
			return p.place(pl)
		}
	}
	return fmt.Errorf("no placement %q", name)
}

// backendOf returns the backend pid that row i runs on: the raw connection's for the raw
// rows, else the Manager's pooled connection's (a lock taken and released to see it).
func backendOf(ctx context.Context, raw *pgx.Conn, m *advisory.Manager, i int) (int, error) {
	if i == 0 || i == 3 {
		return int(raw.PgConn().PID()), nil
	}
	l, err := m.TryLock(ctx, "probe/pid")
	if err != nil {
		return 0, err
	}
	defer l.Unlock(ctx)
	return int(l.PID()), nil
}

// runProbeRole is the probe as a child process of the main run (roleEnv=probe): a fresh
// process on the main run's server, as the outside harness was, whose threads no pinned
// pass has moved. It prints its result as JSON.
func runProbeRole() int {
	cfg := probeConfig{samples: 3000, warmups: 200}
	res, err := probeOn(context.Background(), cfg, os.Getenv("BENCH_DSN"), os.Stderr)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return 0
}

// outsideProbe runs the probe in a child process on the bench's server.
func (b *bench) outsideProbe() (*probeResult, error) {
	cmd := exec.Command(b.self)
	cmd.Env = append(os.Environ(), roleEnv+"=probe", "BENCH_DSN="+b.dsn)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("probe: %v: %s", err, out)
	}
	var res probeResult
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, fmt.Errorf("probe: %v: %s", err, out)
	}
	return &res, nil
}

// probeSection writes the probe's rows beside the bench's own unpinned cycle rows.
func (res results) probeSection(b *strings.Builder) {
	p := res.Probe
	if p == nil || len(p.Rows) < 3 {
		return
	}
	fmt.Fprintf(b, "## The cycle as an outside harness measures it\n\n"+
		"`go run . -probe`'s method, run by the same command in a fresh child process on the same server after the rows "+
		"above (load average %s): a plain pgx.Conn running `select pg_try_advisory_lock($1)` and "+
		"`select pg_advisory_unlock($1)`, interleaved row by row (fixed order) with Lock + Unlock and TryLock + Unlock "+
		"on one Manager with New's defaults, %d samples each after %d warm-ups, unpinned. Both harnesses' ratios:\n\n"+
		"| cycle | outside harness (median) | ratio | this bench, unpinned (median) | ratio |\n|---|---|---|---|---|\n",
		p.Load, p.Samples, p.Warmups)
	kinds := []string{floorBackground, "advisory Lock + Unlock", "advisory TryLock + Unlock"}
	for i, r := range p.Rows[:3] {
		ours := ""
		if o := res.find(kinds[i], "unpinned"); o != nil {
			ratio := "1.00x"
			if o.Ratio > 0 {
				ratio = fmt.Sprintf("%.2fx", o.Ratio)
			}
			ours = fmtVal(o.Median, o.Unit) + " | " + ratio
		}
		fmt.Fprintf(b, "| %s | %.3f ms | %.2fx | %s |\n", r.Name, r.Median/1000, r.Ratio, ours)
	}
	b.WriteString("\n")
}
