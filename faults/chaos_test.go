package faults_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The chaos run. Worker processes loop until a deadline: pick one of a few keys, Lock it
// (with a random short deadline, so many waits are cancelled) or TryLock it, and inside
// the critical section write a witness row with the server's clock: enter after the lock
// was granted, leave before Unlock. A row is "clean" when Unlock then returned nil, which
// proves the session held the lock from grant to unlock. Meanwhile the driver SIGKILLs
// workers (and starts new ones) and terminates backends that hold or wait for the keys.
//
// Violations: two clean intervals of one key that overlap, or a critical section whose
// own pg_locks check did not find its backend holding the key, yet ended clean.
// CHAOS_SEED replays a run's schedule; CHAOS_SECONDS sets its length (default 25).

const witnessDDL = `CREATE TABLE IF NOT EXISTS chaos_witness (
	id bigserial PRIMARY KEY, run text NOT NULL, key text NOT NULL, worker text NOT NULL,
	enter timestamptz NOT NULL, leave timestamptz, outcome text, verified boolean NOT NULL)`

type chaosSummary struct {
	Iterations, Acquired, Clean, Lost, Cancelled, Busy, Terminated, Unexpected int
	Parked                                                                     int // Locks that waited without a session (WithWaitSessions)
	Unreachable                                                                int // connection errors (allowed only while the pooler restarts)
}

func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a slow fault test (tens of seconds); CI runs it")
	}
	chaos(t, dsn(t), 25, nil)
}

// TestChaosThroughAPooler is TestChaos with the workers' Managers behind a real PgBouncer
// in transaction mode, holding by transaction (issue 36); their witness rows are written
// on direct connections, with the server's clock, as in TestChaos. SIGKILLed workers and
// terminated backends reach the pooler's server connections. A SIGKILLed worker can
// crash PgBouncer 1.18 (an abandoned cancel request, pgbouncer issue 801): the run
// restarts it on its port, as a supervisor would, and counts it (see superviseBouncer).
func TestChaosThroughAPooler(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a slow fault test (tens of seconds); CI runs it")
	}
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(14))
	chaos(t, b.DSN(), 20, b)
}

// TestChaosSharedSessions is TestChaos with each worker's Manager sharing sessions
// between its holdings (WithSharedSessions, issue 38): three goroutines per worker take
// the chaos keys beside filler locks that keep the shared sessions populated, so that a
// chaos key is taken on a session that holds others, and a termination of one ends every
// holding on it. Half the workers also wait on one session at most (WithWaitSessions(1)),
// so that their Locks park and are granted by tries on a shared session.
func TestChaosSharedSessions(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a slow fault test (tens of seconds); CI runs it")
	}
	t.Setenv("CHAOS_SHARED", "1")
	chaos(t, dsn(t), 20, nil)
}

// chaos is one chaos run whose workers lock through lockDSN, for the given seconds
// (CHAOS_SECONDS overrides them). pooler, if not nil, is the PgBouncer lockDSN leads
// to: it is restarted whenever it exits during the run (see superviseBouncer), and chaos
// returns how many times.
func chaos(t *testing.T, lockDSN string, seconds int, pooler *pgtest.PgBouncer) (restarts int) {
	dsn(t)
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("CHAOS_SEED"), 10, 64); err == nil {
		seed = v
	}
	if v, err := strconv.Atoi(os.Getenv("CHAOS_SECONDS")); err == nil && v > 0 {
		seconds = v
	}
	t.Logf("chaos seed %d (replay: CHAOS_SEED=%d), %d s", seed, seed, seconds)
	rng := rand.New(rand.NewPCG(seed, 0))
	ctx := ctxT(t, time.Duration(seconds)*time.Second+2*time.Minute)
	_, err := admin.Exec(ctx, witnessDDL)
	require.NoError(t, err)
	run := strconv.FormatUint(seed, 10) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	until := time.Now().Add(time.Duration(seconds) * time.Second)

	// park: the worker waits on one session at most (with CHAOS_SHARED; see
	// runChaosWorker). Half the workers do, and a killed worker's replacement is of its
	// kind, so that half of the survivors, whose summaries are read, are of each.
	workerEnv := func(id int, park bool) map[string]string {
		env := map[string]string{"ADVISORY_FAULT_DSN": dsn(t), "CHAOS_LOCK_DSN": lockDSN, "CHAOS_RUN": run, "CHAOS_WORKER": strconv.Itoa(id),
			"CHAOS_SEED": strconv.FormatUint(seed+uint64(id)*7919, 10), "CHAOS_UNTIL": strconv.FormatInt(until.UnixNano(), 10)}
		if park {
			env["CHAOS_PARK"] = "1"
		}
		return env
	}
	sup := superviseBouncer(pooler)
	const parallel = 4
	workers := map[int]*helper{}
	parks := map[int]bool{}
	nextID := 0
	for ; nextID < parallel; nextID++ {
		parks[nextID] = nextID%2 == 1
		workers[nextID] = startHelper(t, "chaos", workerEnv(nextID, parks[nextID]))
	}
	kills, terms := 0, 0
	for time.Now().Before(until.Add(-time.Second)) {
		time.Sleep(time.Duration(100+rng.IntN(300)) * time.Millisecond)
		if rng.IntN(3) == 0 { // SIGKILL a worker and start a new one
			victim := rng.IntN(nextID)
			if w, ok := workers[victim]; ok {
				syscall.Kill(w.cmd.Process.Pid, syscall.SIGKILL)
				delete(workers, victim)
				kills++
				parks[nextID] = parks[victim]
				workers[nextID] = startHelper(t, "chaos", workerEnv(nextID, parks[nextID]))
				nextID++
			}
			continue
		}
		var ok bool
		err := admin.QueryRow(ctx, `SELECT coalesce(pg_terminate_backend((SELECT pid FROM pg_locks
			WHERE locktype = 'advisory' AND pid <> pg_backend_pid() ORDER BY random() LIMIT 1)), false)`).Scan(&ok)
		require.NoError(t, err)
		if ok {
			terms++
		}
	}
	var total chaosSummary
	for id, w := range workers {
		s := w.expect(t, "SUMMARY", time.Minute)
		var ws chaosSummary
		require.NoError(t, json.Unmarshal([]byte(strings.TrimPrefix(s.text, "SUMMARY ")), &ws), "worker %d", id)
		total = addSummary(total, ws)
	}
	t.Logf("chaos: %d kills, %d backend terminations; survivors' totals %+v", kills, terms, total)
	assert.Zero(t, total.Unexpected, "unexpected errors (printed by the workers above)")
	if restarts = sup.end(t); restarts == 0 {
		assert.Zero(t, total.Unreachable, "connection errors, and the pooler never exited (printed by the workers above)")
	}
	if os.Getenv("CHAOS_SHARED") != "" {
		assert.Positive(t, total.Parked, "no Lock of the workers with WithWaitSessions(1) waited without a session")
	}
	checkWitness(t, ctx, run)
	return restarts
}

func addSummary(a, b chaosSummary) chaosSummary {
	return chaosSummary{a.Iterations + b.Iterations, a.Acquired + b.Acquired, a.Clean + b.Clean, a.Lost + b.Lost,
		a.Cancelled + b.Cancelled, a.Busy + b.Busy, a.Terminated + b.Terminated, a.Unexpected + b.Unexpected,
		a.Parked + b.Parked, a.Unreachable + b.Unreachable}
}

func checkWitness(t *testing.T, ctx context.Context, run string) {
	var rows, clean, overlaps, unverified int
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE outcome = 'clean'),
		count(*) FILTER (WHERE outcome = 'clean' AND NOT verified) FROM chaos_witness WHERE run = $1`, run).
		Scan(&rows, &clean, &unverified))
	require.NoError(t, admin.QueryRow(ctx, `SELECT count(*) FROM chaos_witness a JOIN chaos_witness b
		ON a.run = b.run AND a.key = b.key AND a.id < b.id
		WHERE a.run = $1 AND a.outcome = 'clean' AND b.outcome = 'clean'
		  AND tstzrange(a.enter, a.leave, '[]') && tstzrange(b.enter, b.leave, '[]')`, run).Scan(&overlaps))
	t.Logf("witness: %d critical sections (all workers, killed ones too), %d clean; %d overlapping pairs, %d unverified",
		rows, clean, overlaps, unverified)
	assert.Greater(t, clean, 100, "the run exercised the lock")
	assert.Zero(t, overlaps, "VIOLATION: two holders of one key at once")
	assert.Zero(t, unverified, "VIOLATION: a clean critical section whose backend did not hold the key")
	require.Eventually(t, func() bool {
		var n int
		admin.QueryRow(ctx, "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'").Scan(&n)
		return n == 0
	}, 30*time.Second, 50*time.Millisecond, "no advisory lock outlives the run")
}

// runChaosWorker is one worker process of TestChaos. It prints "UNEXPECTED ..." for any
// error the chaos does not explain, and "SUMMARY {json}" at its deadline.
func runChaosWorker() int {
	seed, _ := strconv.ParseUint(os.Getenv("CHAOS_SEED"), 10, 64)
	untilNanos, _ := strconv.ParseInt(os.Getenv("CHAOS_UNTIL"), 10, 64)
	run, worker := os.Getenv("CHAOS_RUN"), os.Getenv("CHAOS_WORKER")
	ctx := context.Background()
	goroutines, conns, opts := 1, 3, []advisory.Option(nil)
	var parked atomic.Int64
	if os.Getenv("CHAOS_SHARED") != "" {
		goroutines, conns, opts = 3, 8, []advisory.Option{advisory.WithSharedSessions(20)}
		if os.Getenv("CHAOS_PARK") != "" {
			// Half the workers wait on one session at most: their other Locks park, and
			// take the keys by tries on a shared session (WithWaitSessions). The log
			// counts the Locks that parked.
			opts = append(opts, advisory.WithWaitSessions(1),
				advisory.WithLogger(slog.New(&parkCounter{n: &parked})))
		}
	}
	m, err := newUntil(ctx, time.Unix(0, untilNanos), pgtest.WithPairs(os.Getenv("CHAOS_LOCK_DSN"),
		"pool_max_conns="+strconv.Itoa(conns)), opts...)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer m.Close()
	witness, err := pgxpool.New(ctx, os.Getenv("ADVISORY_FAULT_DSN"))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer witness.Close()
	until := time.Unix(0, untilNanos)
	if goroutines > 1 {
		go holdFillers(ctx, m, worker, until)
	}
	sums := make([]chaosSummary, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &chaosWorker{m: m, witness: witness, run: run, worker: worker, rng: rand.New(rand.NewPCG(seed, uint64(g+1)))}
			for time.Now().Before(until) {
				w.iteration(ctx)
			}
			sums[g] = w.sum
		}()
	}
	wg.Wait()
	var sum chaosSummary
	for _, s := range sums {
		sum = addSummary(sum, s)
	}
	sum.Parked = int(parked.Load())
	out, _ := json.Marshal(sum)
	fmt.Println("SUMMARY", string(out))
	return 0
}

// holdFillers keeps four locks of the worker's own held until until, taking each again
// when it is lost, so that the chaos keys are taken on shared sessions that hold others.
func holdFillers(ctx context.Context, m *advisory.Manager, worker string, until time.Time) {
	for i := range 4 {
		go func() {
			name := fmt.Sprintf("chaos-filler/%s/%d", worker, i)
			for time.Now().Before(until) {
				l, err := m.TryLock(ctx, name)
				if err != nil {
					time.Sleep(10 * time.Millisecond)
					continue
				}
				select {
				case <-l.Done():
				case <-time.After(time.Until(until)):
					l.Unlock(ctx)
				}
			}
		}()
	}
}

type chaosWorker struct {
	m           *advisory.Manager
	witness     *pgxpool.Pool
	run, worker string
	rng         *rand.Rand
	sum         chaosSummary
}

func (w *chaosWorker) iteration(ctx context.Context) {
	w.sum.Iterations++
	name := "chaos/" + strconv.Itoa(w.rng.IntN(3))
	wctx, cancel := context.WithTimeout(ctx, time.Duration(1+w.rng.IntN(60))*time.Millisecond)
	var l *advisory.Lock
	var err error
	if w.rng.IntN(5) == 0 {
		l, err = w.m.TryLock(wctx, name)
	} else {
		l, err = w.m.Lock(wctx, name)
	}
	cancel()
	if err != nil {
		w.classify(err)
		return
	}
	w.sum.Acquired++
	w.critical(ctx, l, name)
}

func (w *chaosWorker) classify(err error) {
	var pgErr *pgconn.PgError
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		w.sum.Cancelled++
	case errors.Is(err, advisory.ErrLocked):
		w.sum.Busy++
	case errors.As(err, &pgErr) && pgErr.Code == "57P01": // the driver terminated our waiting backend
		w.sum.Terminated++
	case unreachable(err): // the run judges these: see superviseBouncer
		if w.sum.Unreachable++; w.sum.Unreachable <= 3 { // a restart makes hundreds alike
			fmt.Println("UNREACHABLE", err)
		}
	default:
		w.sum.Unexpected++
		fmt.Println("UNEXPECTED", err)
	}
}

// critical is the critical section: witness rows around a short hold, then Unlock.
func (w *chaosWorker) critical(ctx context.Context, l *advisory.Lock, name string) {
	key := l.Key()
	var id int64
	err := w.witness.QueryRow(ctx, `INSERT INTO chaos_witness (run, key, worker, enter, verified)
		SELECT $1, $2, $3, clock_timestamp(), EXISTS (SELECT 1 FROM pg_locks WHERE locktype = 'advisory'
		  AND granted AND objsubid = 1 AND classid = $4 AND objid = $5 AND pid = $6)
		RETURNING id`, w.run, name, w.worker, uint32(uint64(key)>>32), uint32(key), int32(l.PID())).Scan(&id)
	if err != nil {
		fmt.Println("ERROR witness", err)
		os.Exit(1)
	}
	time.Sleep(time.Duration(w.rng.IntN(3000)) * time.Microsecond)
	var leave time.Time
	if err := w.witness.QueryRow(ctx, "SELECT clock_timestamp()").Scan(&leave); err != nil {
		fmt.Println("ERROR witness", err)
		os.Exit(1)
	}
	outcome := "clean"
	if err := l.Unlock(ctx); err != nil {
		outcome = "lost"
		w.sum.Lost++
		if !errors.Is(err, advisory.ErrLockLost) {
			w.sum.Unexpected++
			fmt.Println("UNEXPECTED unlock", err)
		}
	} else {
		w.sum.Clean++
	}
	if _, err := w.witness.Exec(ctx, "UPDATE chaos_witness SET leave = $2, outcome = $3 WHERE id = $1", id, leave, outcome); err != nil {
		fmt.Println("ERROR witness", err)
		os.Exit(1)
	}
}

// parkCounter is a slog.Handler that counts the Manager's reports of a Lock waiting
// without a session, and drops every record.
type parkCounter struct{ n *atomic.Int64 }

func (c *parkCounter) Enabled(context.Context, slog.Level) bool { return true }
func (c *parkCounter) WithAttrs([]slog.Attr) slog.Handler       { return c }
func (c *parkCounter) WithGroup(string) slog.Handler            { return c }
func (c *parkCounter) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, "without a session") {
		c.n.Add(1)
	}
	return nil
}
