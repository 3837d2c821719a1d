package main

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sys/unix"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// pooledEnv is what a pooled round runs in: the pooler's DSN, its admin console (to make
// it open new server connections) and what moves the processes between CPUs.
type pooledEnv struct {
	dsn    string
	admin  *pgx.Conn
	direct *pgx.Conn // to the server, for the placer
	pb     *pgtest.PgBouncer
	placer *placer
}

func newPooledEnv(ctx context.Context, srv *pgtest.Server, pb *pgtest.PgBouncer) (*pooledEnv, error) {
	direct, err := pgx.Connect(ctx, srv.DSN())
	if err != nil {
		return nil, err
	}
	admin, err := pgx.Connect(ctx, pb.AdminDSN())
	if err != nil {
		direct.Close(ctx)
		return nil, err
	}
	e := &pooledEnv{dsn: pb.DSN(), admin: admin, direct: direct, pb: pb}
	if e.placer, err = newPlacer(ctx, direct); err != nil {
		e.close()
		return nil, fmt.Errorf("placement needs root (or CAP_SYS_NICE): %w", err)
	}
	return e, nil
}

func (e *pooledEnv) close() {
	e.admin.Close(context.Background())
	e.direct.Close(context.Background())
}

// place moves the client's threads to pl's client CPUs, and the server's processes and
// PgBouncer to its server CPUs: the pooler goes with the server.
func (e *pooledEnv) place(pl placement) error {
	e.placer.current = "" // new backends since the last call: move them all again
	if err := e.placer.place(pl); err != nil {
		return err
	}
	if err := setCPUs(e.pb.PID(), pl.server); err != nil && err != unix.ESRCH {
		return fmt.Errorf("pgbouncer %d: %w", e.pb.PID(), err)
	}
	return nil
}

// round runs one round of rows in pl: PgBouncer's server connections are replaced
// (RECONNECT: each is closed when next released, and new ones open), every row opens its
// connection or Manager afresh, the processes are placed, every row runs cfg.warmups
// untimed cycles, then cfg.cycles timed ones each, interleaved cycle by cycle with the
// order rotated by one every cycle. The per-row medians and their ratios are kept.
func (e *pooledEnv) round(ctx context.Context, cfg pooledConfig, pl placement, rows []*pooledRow, r int) error {
	if _, err := e.admin.Exec(ctx, "RECONNECT"); err != nil {
		return fmt.Errorf("pgbouncer RECONNECT: %w", err)
	}
	if err := e.place(placement{Name: "unpinned"}); err != nil {
		return err
	}
	cycles := make([]func(context.Context) error, len(rows))
	for i, row := range rows {
		cycle, done, err := row.open(ctx, e.dsn)
		if err != nil {
			return fmt.Errorf("%s: %w", row.name, err)
		}
		defer done()
		cycles[i] = cycle
	}
	if err := runCycles(ctx, rows, cycles, cfg.warmups, false); err != nil {
		return err
	}
	if err := e.place(pl); err != nil { // the backends the warm-up opened go too
		return err
	}
	if err := runCycles(ctx, rows, cycles, cfg.warmups, false); err != nil {
		return err
	}
	if err := runCycles(ctx, rows, cycles, cfg.cycles, true); err != nil {
		return err
	}
	for _, row := range rows {
		if row.ratios == nil {
			row.ratios, row.micros = map[string][]float64{}, map[string][]float64{}
		}
		row.micros[pl.Name] = append(row.micros[pl.Name], median(row.vals))
	}
	for _, row := range rows {
		m := row.micros[pl.Name]
		f := rows[row.floor].micros[pl.Name]
		row.ratios[pl.Name] = append(row.ratios[pl.Name], m[len(m)-1]/f[len(f)-1])
		row.vals = row.vals[:0]
	}
	return e.place(placement{Name: "unpinned"})
}

// runCycles runs n cycles of every row, interleaved, the starting row rotating; timed
// keeps each cycle's time (µs) in its row.
func runCycles(ctx context.Context, rows []*pooledRow, cycles []func(context.Context) error, n int, timed bool) error {
	for i := 0; i < n; i++ {
		for k := range rows {
			j := (i + k) % len(rows)
			start := time.Now()
			if err := cycles[j](ctx); err != nil {
				return fmt.Errorf("%s: %w", rows[j].name, err)
			}
			if timed {
				rows[j].vals = append(rows[j].vals, float64(time.Since(start))/float64(time.Microsecond))
			}
		}
	}
	return nil
}
