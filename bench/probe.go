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
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The cycle probe is the outside harness of issue 24 written down: a plain pgx.Conn
// running `select pg_try_advisory_lock($1)` and `select pg_advisory_unlock($1)`,
// interleaved row by row with m.Lock+Unlock and m.TryLock+Unlock on Managers made with
// New's defaults, warm-ups first, then medians. Nothing else runs in the process: no
// other pools, no placement moves, no untimed run before each sample. It is the check on
// the main bench's cycle rows (cycles.go), which must agree with it. Two things make a
// single run of it measure luck rather than code on a small machine, and both have an
// option: one pair of connections is one draw of the scheduler's placement (draws), and
// rows that share a backend are favoured (oneManager, the harness as written).

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
	// draws splits the samples between this many draws, each with a new raw connection
	// and a new Manager, so new backends. On 2 vCPUs a cycle takes about 65 µs while the
	// scheduler keeps the backend on the client thread's CPU and 140-190 µs while every
	// message crosses to the other, and where a backend runs holds for hundreds of
	// cycles at a time, per backend: one pair of connections is one draw, and its ratio
	// says more about that draw than about the code.
	draws int
	// oneManager runs Lock and TryLock on one Manager, as the harness did, instead
	// of a Manager each (see probeRows).
	oneManager bool
}

type probeRow struct {
	name    string
	op      func(ctx context.Context) error
	backend func(ctx context.Context) (int, error) // the pid of the backend op runs on
	vals    []float64
}

// probeConns are a draw's connections, one per row (see probeRows).
type probeConns struct {
	raw, raw2 *pgx.Conn
	lock, try *advisory.Manager
}

// probeRows returns the outside harness's three rows and, with variants, the forms of the
// floor that the main bench used before issue 24 (a literal key; two statements that are
// each prepared once), so a run shows which difference moves the floor. Each row runs on
// its own connection: the harness ran Lock and TryLock on one Manager, whose
// backend, serving two rows of three, was more often still on its CPU at its next cycle
// than the floor's, serving one; that favoured them by about 0.03-0.06x (with the variant's
// row on the floor's connection, two rows each, the ratios rose by as much).
func probeRows(c probeConns, variants bool) []*probeRow {
	key := int64(advisory.KeyOf("probe/raw"))
	rows := []*probeRow{
		{name: "raw pgx (pg_try_advisory_lock($1), pg_advisory_unlock($1))", op: func(ctx context.Context) error {
			return rawCycle(ctx, c.raw, key)
		}, backend: connBackend(c.raw)},
		{name: "advisory Lock + Unlock", op: func(ctx context.Context) error { return lockCycle(ctx, c.lock, "probe/lock") },
			backend: managerBackend(c.lock)},
		{name: "advisory TryLock + Unlock", op: func(ctx context.Context) error { return tryCycle(ctx, c.try, "probe/try") },
			backend: managerBackend(c.try)},
	}
	if variants {
		rows = append(rows, &probeRow{name: "raw pgx, literal key (the old bench floor)", op: func(ctx context.Context) error {
			var ok bool
			if err := c.raw2.QueryRow(ctx, "SELECT pg_try_advisory_lock(43)").Scan(&ok); err != nil || !ok {
				return fmt.Errorf("try lock: %v %v", ok, err)
			}
			return c.raw2.QueryRow(ctx, "SELECT pg_advisory_unlock(43)").Scan(&ok)
		}, backend: connBackend(c.raw2)})
	}
	return rows
}

// connBackend returns a plain connection's backend pid.
func connBackend(c *pgx.Conn) func(context.Context) (int, error) {
	return func(context.Context) (int, error) { return int(c.PgConn().PID()), nil }
}

// managerBackend returns the backend pid of m's pooled connection, which an uncontended
// cycle always takes (a lock taken and released to see it).
func managerBackend(m *advisory.Manager) func(context.Context) (int, error) {
	return func(ctx context.Context) (int, error) {
		l, err := m.TryLock(ctx, "probe/pid")
		if err != nil {
			return 0, err
		}
		defer l.Unlock(ctx)
		return int(l.PID()), nil
	}
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

// lockCycle is one Lock and its Unlock.
func lockCycle(ctx context.Context, m *advisory.Manager, name string) error {
	l, err := m.Lock(ctx, name)
	if err != nil {
		return err
	}
	return l.Unlock(ctx)
}

// tryCycle is one TryLock and its Unlock.
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
	Draws   int              `json:"draws,omitempty"` // 0 or 1: one raw connection and one Manager
	Load    string           `json:"load"`
	Rows    []probeRowResult `json:"rows"`
}

type probeRowResult struct {
	Name   string  `json:"name"`
	Median float64 `json:"median_us"`
	P90    float64 `json:"p90_us"`
	Ratio  float64 `json:"ratio"` // to the first row, the raw floor
	// DrawRatios are the row's median over the floor's in each draw (with more than one).
	DrawRatios []float64 `json:"draw_ratios,omitempty"`
}

// probeOn runs the probe against dsn's server, prints it to out and returns it. With
// draws > 1 the samples are split between draws, and every draw opens its own raw
// connection and its own Manager: new backends, placed afresh by the scheduler (see
// draws in probeConfig).
func probeOn(ctx context.Context, cfg probeConfig, dsn string, out io.Writer) (probeResult, error) {
	draws := max(cfg.draws, 1)
	if cfg.cpu || cfg.profile != "" || cfg.placement != "" && cfg.placement != "unpinned" {
		draws = 1 // these look at one pair of backends
	}
	res := probeResult{Samples: cfg.samples, Warmups: cfg.warmups, Draws: draws}
	load := loadAverage()
	var rows []*probeRow
	var drawRatios [][]float64 // per row, its median over the floor's in each draw
	for d := 0; d < draws; d++ {
		n := cfg.samples / draws
		if d < cfg.samples%draws {
			n++
		}
		er, err := probeDraw(ctx, cfg, dsn, out, n)
		if err != nil || cfg.cpu {
			return res, err
		}
		if rows == nil {
			rows = make([]*probeRow, len(er))
			drawRatios = make([][]float64, len(er))
			for i, r := range er {
				rows[i] = &probeRow{name: r.name}
			}
		}
		floor := median(er[0].vals)
		for i, r := range er {
			rows[i].vals = append(rows[i].vals, r.vals...)
			drawRatios[i] = append(drawRatios[i], median(r.vals)/floor)
		}
	}
	pl := cfg.placement
	if pl == "" {
		pl = "unpinned"
	}
	drawn := map[bool]string{true: "Lock and TryLock on one Manager", false: "a connection or a Manager per row"}[cfg.oneManager]
	if draws > 1 {
		drawn = fmt.Sprintf("%s, %d draws of them", drawn, draws)
	} else {
		drawn += ", one draw of them"
	}
	fmt.Fprintf(out, "cycle probe: %d samples per row after %d warm-ups, interleaved row by row (%s order%s), %s, %s; load average %s → %s\n",
		cfg.samples, cfg.warmups, map[bool]string{true: "shuffled", false: "fixed"}[cfg.shuffle],
		map[bool]string{true: ", each sample after an untimed run of its row", false: ""}[cfg.warm], pl, drawn, load, loadAverage())
	res.Load = load + " → " + loadAverage()
	floor := median(rows[0].vals)
	for i, r := range rows {
		med := median(r.vals)
		rr := probeRowResult{Name: r.name, Median: med, P90: quantileOf(r.vals, 0.9), Ratio: med / floor}
		if draws > 1 {
			rr.DrawRatios = drawRatios[i]
		}
		res.Rows = append(res.Rows, rr)
		fmt.Fprintf(out, "  %-62s median %7.1f µs  p90 %7.1f µs  %.2fx", rr.Name, rr.Median, rr.P90, rr.Ratio)
		if draws > 1 && i > 0 {
			fmt.Fprintf(out, "  (per draw %s)", drawRatiosText(drawRatios[i]))
		}
		fmt.Fprintln(out)
		if cfg.histogram {
			histogram(out, r.vals, 10)
		}
	}
	return res, nil
}

// probeDraw opens the rows' connections and Managers, warms them up and times n samples
// of every row on them; with cfg.cpu it prints CPU per cycle instead.
func probeDraw(ctx context.Context, cfg probeConfig, dsn string, out io.Writer, n int) ([]*probeRow, error) {
	var c probeConns
	conns, managers := []**pgx.Conn{&c.raw}, []**advisory.Manager{&c.lock}
	if cfg.variants {
		conns = append(conns, &c.raw2)
	}
	if !cfg.oneManager {
		managers = append(managers, &c.try)
	}
	var err error
	for _, r := range conns {
		if *r, err = pgx.Connect(ctx, dsn); err != nil {
			return nil, err
		}
		defer (*r).Close(context.Background())
	}
	for _, m := range managers {
		if *m, err = advisory.New(ctx, dsn); err != nil {
			return nil, err
		}
		defer (*m).Close()
	}
	if cfg.oneManager {
		c.try = c.lock
	}
	rows := probeRows(c, cfg.variants)
	if cfg.only != "" {
		rows = keepProbeRows(rows, cfg.only)
	}
	if cfg.placement != "" && cfg.placement != "unpinned" {
		if err := placeProbe(ctx, c.raw, cfg.placement); err != nil {
			return nil, err
		}
	}
	if err := probeRounds(ctx, rows, cfg.warmups, false, false, false); err != nil {
		return nil, err
	}
	if cfg.cpu {
		return rows, probeCPU(ctx, out, rows, 10, 500)
	}
	if cfg.profile != "" {
		f, err := os.Create(cfg.profile)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	return rows, probeRounds(ctx, rows, n, true, cfg.shuffle, cfg.warm)
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

// runProbeRole is the probe as a child process of the main run (roleEnv=probe): a fresh
// process on the main run's server, as the outside harness was, whose threads no pinned
// pass has moved. It prints its result as JSON.
func runProbeRole() int {
	cfg := probeConfig{samples: 3000, warmups: 200, oneManager: true} // as the harness was written
	if d, _ := strconv.Atoi(os.Getenv("BENCH_PROBE_DRAWS")); d > 1 {
		cfg.draws, cfg.shuffle, cfg.oneManager = d, true, false
	}
	res, err := probeOn(context.Background(), cfg, os.Getenv("BENCH_DSN"), os.Stderr)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	return 0
}

// probeDraws is how many draws the child's second probe splits its samples between.
const probeDraws = 20

// outsideProbe runs the probe in a child process on the bench's server: as the issue's
// harness was written (one raw connection and one Manager, fixed order), and then over
// probeDraws draws, a connection per row, shuffled.
func (b *bench) outsideProbe() (one, many *probeResult, err error) {
	if one, err = b.probeChild(1); err != nil {
		return nil, nil, err
	}
	many, err = b.probeChild(probeDraws)
	return one, many, err
}

func (b *bench) probeChild(draws int) (*probeResult, error) {
	cmd := exec.Command(b.self)
	cmd.Env = append(os.Environ(), roleEnv+"=probe", "BENCH_DSN="+b.dsn, fmt.Sprintf("BENCH_PROBE_DRAWS=%d", draws))
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
	p, pd := res.Probe, res.ProbeDraws
	if p == nil || len(p.Rows) < 3 {
		return
	}
	fmt.Fprintf(b, "## The cycle as an outside harness measures it\n\n"+
		"`go run . -probe`'s method, run by the same command in a fresh child process on the same server after the rows "+
		"above. First as the issue's harness was written (`-probe-one-manager`; load average %s): a plain pgx.Conn running "+
		"`select pg_try_advisory_lock($1)` and `select pg_advisory_unlock($1)`, interleaved row by row (fixed order) "+
		"with Lock + Unlock and TryLock + Unlock on one Manager with New's defaults, %d samples each after %d warm-ups, "+
		"unpinned: one draw of the backends, and Lock and TryLock share one.", p.Load, p.Samples, p.Warmups)
	if pd != nil {
		fmt.Fprintf(b, " Then, in another child (load average %s), as this bench measures (`-probe-draws %d -probe-shuffle`): "+
			"a connection or a Manager per row, opened again for each of %d draws, %d samples per row in all, shuffled "+
			"order; *per draw* is the median, then the range, of the rows' ratios within each draw. "+
			"See \"Why two harnesses' floors disagreed\" for why both changes matter.", pd.Load, pd.Draws, pd.Draws, pd.Samples)
	}
	b.WriteString("\n\n| cycle | the issue's harness | many draws, a connection per row | per draw | " +
		"this bench, unpinned | per draw |\n|---|---|---|---|---|---|\n")
	kinds := []string{floorBackground, "advisory Lock + Unlock", "advisory TryLock + Unlock"}
	for i, r := range p.Rows[:3] {
		many, manyDraws := "", ""
		if pd != nil && len(pd.Rows) > i {
			many = fmt.Sprintf("%.3f ms, %.2fx", pd.Rows[i].Median/1000, pd.Rows[i].Ratio)
			manyDraws = drawRatiosText(pd.Rows[i].DrawRatios)
		}
		ours, oursDraws := "", ""
		if o := res.find(kinds[i], "unpinned"); o != nil {
			ratio := 1.0
			if o.Ratio > 0 {
				ratio = o.Ratio
			}
			ours, oursDraws = fmt.Sprintf("%s, %.2fx", fmtVal(o.Median, o.Unit), ratio), drawText(o)
		}
		fmt.Fprintf(b, "| %s | %.3f ms, %.2fx | %s | %s | %s | %s |\n", r.Name, r.Median/1000, r.Ratio, many, manyDraws, ours, oursDraws)
	}
	b.WriteString("\n")
}
