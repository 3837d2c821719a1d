package faults_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// never is a figure that did not happen within the observation's window.
const never = time.Duration(-1)

// observation watches holders from a fault (t0) until each is told, its holding is gone
// from pg_locks and, if the pooler is probed, a client through the pooler took its key,
// or until the window ends. Figures are durations after t0.
type observation struct {
	t0, end time.Time
	mu      sync.Mutex
	// lastHeld is the start of the last pg_locks read that still showed a holding; the
	// safety check: no client ever took a key after such a read began.
	lastHeld map[*poolHolder]time.Time
	takes    []take
}

// take is a client through the pooler getting a held key: when its statement returned,
// and on which backend.
type take struct {
	p   *poolHolder
	end time.Time
	pid uint32
}

// observe measures, for every holder of cases: told (its TOLD line), freed (the first
// pg_locks read without its holding) and, when probe is set, taken (the first
// pg_try_advisory_xact_lock of its key that a client through its PgBouncer won). It
// blocks until each figure is in or window has passed since t0, then asserts that no key
// was taken while its holding still showed, nor on the holding's backend. The
// observation can go on with [observation.extend].
func observe(t *testing.T, cases []*poolerCase, t0 time.Time, window time.Duration, probe bool) *observation {
	t.Helper()
	o := &observation{t0: t0, lastHeld: map[*poolHolder]time.Time{}}
	for _, p := range allHolders(cases) {
		p.fig.told, p.fig.freed, p.fig.taken, p.fig.noticed, p.fig.healed = never, never, never, never, never
	}
	o.extend(t, cases, time.Until(t0.Add(window)), probe)
	return o
}

// extend goes on measuring what has not happened yet, for d more (after a healed cut, a
// restarted pooler), as observe does.
func (o *observation) extend(t *testing.T, cases []*poolerCase, d time.Duration, probe bool) {
	t.Helper()
	o.end = time.Now().Add(d)
	holders := allHolders(cases)
	var wg sync.WaitGroup
	for _, p := range holders {
		if p.fig.told == never {
			wg.Go(func() { o.awaitTold(p) })
		}
	}
	wg.Go(func() { o.pollLocks(t, holders) })
	if probe {
		for _, c := range cases {
			wg.Go(func() { o.probe(c) })
		}
	}
	wg.Wait()
	o.checkTakes(t)
}

// awaitTold reads the holder's lines until its TOLD line or the window's end.
func (o *observation) awaitTold(p *poolHolder) {
	timer := time.NewTimer(time.Until(o.end))
	defer timer.Stop()
	for {
		select {
		case l, ok := <-p.h.lines:
			if !ok {
				return
			}
			if text, found := strings.CutPrefix(l.text, "TOLD "); found {
				p.fig.told, p.fig.toldText = l.at.Sub(o.t0), text
				return
			}
		case <-timer.C:
			return
		}
	}
}

// pollLocks reads pg_locks every 10 ms until every holding is gone or the window ends.
func (o *observation) pollLocks(t *testing.T, holders []*poolHolder) {
	for left := len(holders); left > 0 && time.Now().Before(o.end); time.Sleep(10 * time.Millisecond) {
		start := time.Now()
		held, err := grantedAdvisory(context.Background())
		if err != nil {
			t.Errorf("pg_locks: %v", err)
			return
		}
		left = 0
		o.mu.Lock()
		for _, p := range holders {
			switch {
			case p.fig.freed != never:
			case held[p.key] == p.pid:
				o.lastHeld[p] = start
				left++
			default:
				p.fig.freed = start.Sub(o.t0)
			}
		}
		o.mu.Unlock()
	}
}

// grantedAdvisory returns the granted bigint advisory locks and a backend holding each.
func grantedAdvisory(ctx context.Context) (map[advisory.Key]uint32, error) {
	rows, err := admin.Query(ctx, `SELECT (classid::bigint << 32 | objid::bigint), pid FROM pg_locks
		WHERE locktype = 'advisory' AND granted AND objsubid = 1`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[advisory.Key]uint32{}
	for rows.Next() {
		var k int64
		var pid uint32
		if err := rows.Scan(&k, &pid); err != nil {
			return nil, err
		}
		out[advisory.Key(k)] = pid
	}
	return out, rows.Err()
}

// probe tries, through c's PgBouncer from the host every 50 ms, to take each holder's key
// not taken yet, until all are or the window ends. A connection that fails is dialled
// again (PgBouncer may be restarting).
func (o *observation) probe(c *poolerCase) {
	var conn *pgconn.PgConn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	for left := len(c.holders); left > 0 && time.Now().Before(o.end); time.Sleep(50 * time.Millisecond) {
		if conn == nil || conn.IsClosed() {
			conn = dialProbe(c.b)
			continue
		}
		left = 0
		for _, p := range c.holders {
			if p.fig.taken == never && !o.tryTake(conn, p) {
				left++
			}
		}
	}
}

// dialProbe connects to b from the host within a second, or returns nil.
func dialProbe(b *pgtest.PgBouncer) *pgconn.PgConn {
	cfg, err := pgconn.ParseConfig(b.DSN() + " connect_timeout=1")
	if err != nil {
		return nil
	}
	cfg.DialFunc = pgtest.NoCancel(nil)
	conn, _ := pgconn.ConnectConfig(context.Background(), cfg)
	return conn
}

// tryTake runs one pg_try_advisory_xact_lock of p's key (a transaction of one statement:
// the key is released as it ends) under a 1 s deadline and records a win.
func (o *observation) tryTake(conn *pgconn.PgConn, p *poolHolder) bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	res, err := conn.Exec(ctx, fmt.Sprintf(
		"SELECT pg_catalog.pg_backend_pid(), pg_catalog.pg_try_advisory_xact_lock(%d)", int64(p.key))).ReadAll()
	if err != nil || len(res) != 1 || len(res[0].Rows) != 1 || string(res[0].Rows[0][1]) != "t" {
		return false
	}
	end := time.Now()
	var pid uint32
	fmt.Sscan(string(res[0].Rows[0][0]), &pid)
	o.mu.Lock()
	defer o.mu.Unlock()
	p.fig.taken = end.Sub(o.t0)
	o.takes = append(o.takes, take{p: p, end: end, pid: pid})
	return true
}

// checkTakes asserts the guarantee: never two holders. No take of a key returned before a
// pg_locks read that still showed its holding began, and none ran on the holding's
// backend.
func (o *observation) checkTakes(t *testing.T) {
	t.Helper()
	for _, tk := range o.takes {
		assert.True(t, o.lastHeld[tk.p].Before(tk.end),
			"%s/%s: a client through the pooler took the key while pg_locks still showed the holding", tk.p.fig.pooler, tk.p.fig.watch)
		assert.NotEqual(t, tk.p.pid, tk.pid, "%s/%s: the key was taken on the holding's own backend", tk.p.fig.pooler, tk.p.fig.watch)
	}
}
