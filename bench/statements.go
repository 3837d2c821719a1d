package main

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory"
)

// The statements probe (-statements): what a lock costs a server with a fleet's
// backends, by the statement that takes it, in plain pgx so that nothing else differs.
// It asks why a named lock lags the same lock by key at fleet scale (docs/benchmarks.md,
// "Reading the fleet"), what the alternatives would cost and buy, and what the session
// settings every lock connection gets (manager_setup.go) cost the server. Every mode
// unlocks with the same prepared statement; the texts are the library's (statements.go).

type stmtConfig struct {
	conns, names, reps int
	window             time.Duration
	rate               float64 // the paced phase's locks/s in all
}

// stmtMode is one way to take a lock; contended reports that it took a second statement.
type stmtMode struct {
	name     string
	settings bool // the library's session settings on every connection
	sockets  bool // the library's client socket options (keepalive, TCP_USER_TIMEOUT) on every connection
	lock     func(ctx context.Context, c *pgx.Conn, key int64, name string) (contended bool, err error)
}

const (
	stmtLockSQL   = "SELECT pg_catalog.pg_advisory_lock($1) IS NOT NULL"
	stmtTrySQL    = "SELECT pg_catalog.pg_try_advisory_lock($1)"
	stmtUnlockSQL = "SELECT pg_catalog.pg_advisory_unlock($1)"
)

// stmtSettings are a lock connection's session settings with the library's defaults
// (keepalive.go: serverSettings).
const stmtSettings = "SET tcp_keepalives_idle = 10; SET tcp_keepalives_interval = 5; SET tcp_keepalives_count = 4; " +
	"SET tcp_user_timeout = 30000; SET lock_timeout = 0; SET statement_timeout = 0; " +
	"SET idle_in_transaction_session_timeout = 0; SET idle_session_timeout = 0; SET client_connection_check_interval = 1000"

func stmtComment(name string) string { return "/* advisory lock " + strconv.Quote(name) + " */ " }

// stmtNamedSQL is the text a named lock sends until its connection has used it 32 times.
func stmtNamedSQL(name string, key int64) string {
	return stmtComment(name) + "SELECT pg_catalog.pg_advisory_lock('" + strconv.FormatInt(key, 10) + "'::bigint) IS NOT NULL"
}

func stmtModes() []stmtMode {
	byKey := func(ctx context.Context, c *pgx.Conn, key int64, _ string) (bool, error) {
		var ok bool
		return false, c.QueryRow(ctx, stmtLockSQL, key).Scan(&ok)
	}
	named := func(ctx context.Context, c *pgx.Conn, key int64, name string) (bool, error) {
		var ok bool
		return false, c.QueryRow(ctx, stmtNamedSQL(name, key), pgx.QueryExecModeSimpleProtocol).Scan(&ok)
	}
	// pipelined sends a prepared statement by key and, in the same round trip, a statement
	// that is only the name's comment: pg_stat_activity then shows the name once the lock
	// is held, but a waiter shows the statement by key.
	pipelined := func(ctx context.Context, c *pgx.Conn, sql string, key int64, name string) (bool, error) {
		sd, err := c.Prepare(ctx, sql, sql)
		if err != nil {
			return false, err
		}
		b := &pgconn.Batch{}
		b.ExecPrepared(sd.Name, [][]byte{[]byte(strconv.FormatInt(key, 10))}, nil, nil)
		b.ExecParams(stmtComment(name), nil, nil, nil, nil)
		res, err := c.PgConn().ExecBatch(ctx, b).ReadAll()
		if err != nil {
			return false, err
		}
		if len(res) != 2 || len(res[0].Rows) != 1 {
			return false, fmt.Errorf("statements probe: unexpected results %v", res)
		}
		return string(res[0].Rows[0][0]) != "t", nil
	}
	return []stmtMode{
		{name: "by key, prepared (LockKey)", lock: byKey},
		{name: "by key, prepared, the library's session settings", settings: true, lock: byKey},
		{name: "by key, prepared, the library's client socket options", sockets: true, lock: byKey},
		{name: "named, simple protocol (Lock)", lock: named},
		{name: "by key, then the name's comment, pipelined", lock: func(ctx context.Context, c *pgx.Conn, key int64, name string) (bool, error) {
			return pipelined(ctx, c, stmtLockSQL, key, name)
		}},
		{name: "try by key + the name's comment; else named wait", lock: func(ctx context.Context, c *pgx.Conn, key int64, name string) (bool, error) {
			busy, err := pipelined(ctx, c, stmtTrySQL, key, name)
			if err != nil || !busy {
				return false, err
			}
			_, err = named(ctx, c, key, name)
			return true, err
		}},
	}
}

// stmtSample is one mode's window.
type stmtSample struct {
	rate, serverPerLock, clientPerLock, p50, contended float64 // locks/s, µs, µs, ms, share
}

// runStatements runs the probe on a throwaway cluster and prints its tables to out.
func runStatements(ctx context.Context, cfg stmtConfig, out io.Writer) error {
	ms, err := startMetered(ctx, cfg.conns+20)
	if err != nil {
		return err
	}
	defer ms.Close()
	if ms.meterErr != nil {
		return ms.meterErr
	}
	srv, server, sm := ms.srv, ms.settings, ms.meter
	conns := make([]*pgx.Conn, cfg.conns)
	for i := range conns {
		if conns[i], err = pgx.Connect(ctx, srv.DSN()); err != nil {
			return err
		}
		defer conns[i].Close(ctx)
	}
	names, keys := make([]string, cfg.names), make([]int64, cfg.names)
	for i := range names {
		names[i] = "fleet/" + strconv.Itoa(i)
		keys[i] = int64(advisory.KeyOf(names[i]))
	}
	fmt.Fprintf(out, "statements probe: %d connections, %d names uniform, %d reps of %v per mode, interleaved (order rotated per rep); %s; %s; load %s\n",
		cfg.conns, cfg.names, cfg.reps, cfg.window, server, machineLine(), loadAverage())
	modes := stmtModes()
	// Fresh backends run far slower for their first seconds (docs/benchmarks.md, "Fleet"):
	// one untimed window first, so that the first mode of the first rep is not their victim.
	if _, err := stmtWindow(ctx, cfg, modes[0], conns, names, keys, sm, false, -1); err != nil {
		return err
	}
	for _, paced := range []bool{false, true} {
		samples := make([][]stmtSample, len(modes))
		for rep := range cfg.reps {
			for j := range modes {
				i := (j + rep) % len(modes)
				s, err := stmtWindow(ctx, cfg, modes[i], conns, names, keys, sm, paced, rep)
				if err != nil {
					return fmt.Errorf("%s: %w", modes[i].name, err)
				}
				samples[i] = append(samples[i], s)
			}
		}
		stmtTable(out, cfg, modes, samples, paced)
	}
	return nil
}

// stmtWindow runs one mode for one window. Saturated, every connection has a goroutine
// that locks and unlocks as fast as it can; paced, 50 goroutines share the connections
// round-robin and lock at even intervals, cfg.rate locks/s in all, so that each
// connection's backend sleeps between its locks as a fleet's does.
func stmtWindow(ctx context.Context, cfg stmtConfig, m stmtMode, conns []*pgx.Conn, names []string, keys []int64,
	sm *serverMeter, paced bool, rep int) (stmtSample, error) {
	setting := "RESET ALL"
	if m.settings {
		setting = stmtSettings
	}
	for _, c := range conns {
		if _, err := c.Exec(ctx, setting); err != nil {
			return stmtSample{}, err
		}
		if err := stmtSocket(c, m.sockets); err != nil {
			return stmtSample{}, err
		}
	}
	workers := len(conns)
	if paced {
		workers = 50
	}
	per := len(conns) / workers
	var mu sync.Mutex
	var lats []time.Duration
	var contended int
	var firstErr error
	var wg sync.WaitGroup
	c0, cl0, t0 := sm.cpu(), clientRunTime(), time.Now()
	stop := t0.Add(cfg.window)
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(rep), uint64(w)))
			var mine []time.Duration
			var busy int
			var interval time.Duration
			if paced {
				interval = time.Duration(float64(workers) / cfg.rate * float64(time.Second))
			}
			next := t0.Add(interval * time.Duration(w) / time.Duration(workers))
			var err error
			for i := 0; err == nil && time.Now().Before(stop); i++ {
				if paced {
					time.Sleep(time.Until(next))
					next = next.Add(interval)
				}
				c, n := conns[w*per+i%per], rng.IntN(len(names))
				start := time.Now()
				var more bool
				if more, err = m.lock(ctx, c, keys[n], names[n]); err == nil {
					mine = append(mine, time.Since(start))
					var ok bool
					err = c.QueryRow(ctx, stmtUnlockSQL, keys[n]).Scan(&ok)
				}
				if more {
					busy++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			lats, contended = append(lats, mine...), contended+busy
			if err != nil && firstErr == nil {
				firstErr = err
			}
		})
	}
	wg.Wait()
	elapsed, server, client := time.Since(t0), sm.cpu()-c0, time.Duration(clientRunTime()-cl0)
	if firstErr != nil || len(lats) == 0 {
		return stmtSample{}, fmt.Errorf("no locks taken: %v", firstErr)
	}
	slices.Sort(lats)
	n := float64(len(lats))
	return stmtSample{rate: n / elapsed.Seconds(), serverPerLock: float64(server.Microseconds()) / n,
		clientPerLock: float64(client.Microseconds()) / n,
		p50:           float64(lats[len(lats)/2].Microseconds()) / 1000, contended: float64(contended) / n}, nil
}

// stmtTable prints one phase: per mode, the medians over reps, and its locks/s (paced: its
// server CPU per lock) as a ratio to the first mode's in the same rep (median and range).
func stmtTable(out io.Writer, cfg stmtConfig, modes []stmtMode, samples [][]stmtSample, paced bool) {
	if paced {
		fmt.Fprintf(out, "\npaced, %.0f locks/s in all (50 goroutines, each connection used about every %.1f s):\n", cfg.rate, float64(cfg.conns)/cfg.rate)
	} else {
		fmt.Fprintf(out, "\nsaturated (one goroutine per connection, as fast as the CPUs let it):\n")
	}
	what := "locks/s"
	if paced {
		what = "server CPU per lock" // every mode takes the same locks/s
	}
	fmt.Fprintf(out, "| mode | locks/s | %s / by key's (range) | server CPU per lock | client CPU per lock | p50 acquire | second statement |\n|---|---|---|---|---|---|---|\n", what)
	for i, m := range modes {
		var rate, cpu, cl, p50, busy, ratio []float64
		for r, s := range samples[i] {
			rate, cpu, cl, p50, busy = append(rate, s.rate), append(cpu, s.serverPerLock), append(cl, s.clientPerLock), append(p50, s.p50), append(busy, s.contended)
			if paced {
				ratio = append(ratio, s.serverPerLock/samples[0][r].serverPerLock)
			} else {
				ratio = append(ratio, s.rate/samples[0][r].rate)
			}
		}
		fmt.Fprintf(out, "| %s | %.0f | %.2fx (%.2fx–%.2fx) | %.0f µs | %.0f µs | %.2f ms | %.0f %% |\n", m.name, median(rate), median(ratio),
			slices.Min(ratio), slices.Max(ratio), median(cpu), median(cl), median(p50), 100*median(busy))
	}
}

// stmtSocket gives c's socket the library's default client keepalive (keepalive.go:
// 4 s idle, 2 s interval, 3 probes, TCP_USER_TIMEOUT their sum, 10 s) when on, and pgx's
// defaults (keepalive after 5 min, no user timeout) when off.
func stmtSocket(c *pgx.Conn, on bool) error {
	tcp, ok := c.PgConn().Conn().(*net.TCPConn)
	if !ok {
		return fmt.Errorf("statements probe: not a TCP connection: %T", c.PgConn().Conn())
	}
	ka, user := net.KeepAliveConfig{Enable: true, Idle: 5 * time.Minute, Interval: 5 * time.Minute, Count: 9}, 0
	if on {
		ka, user = net.KeepAliveConfig{Enable: true, Idle: 4 * time.Second, Interval: 2 * time.Second, Count: 3}, 10000
	}
	if err := tcp.SetKeepAliveConfig(ka); err != nil {
		return err
	}
	raw, err := tcp.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := raw.Control(func(fd uintptr) {
		serr = syscall.SetsockoptInt(int(fd), syscall.IPPROTO_TCP, 0x12 /* TCP_USER_TIMEOUT */, user)
	}); err != nil {
		return err
	}
	return serr
}

// statementsNotes is the statements probe's section of docs/benchmarks.md: figures of
// one run of -statements, typed from its output (it writes no results file).
const statementsNotes = `## What a lock's statement costs at fleet scale (issue 24)

` + "`cd bench && go run . -statements`" + ` (statements.go) takes locks in plain pgx on 1,000
connections to one server, the fleet's shape (a throwaway cluster, max_connections 1,020;
1,000 names, uniform), by each way of sending the lock statement; every mode unlocks with
the same prepared statement. Modes are interleaved, their order rotated per rep, after one
untimed window: 7 reps of 8 s, saturated (a goroutine per connection, as fast as the CPUs
let it) and paced (1,000 locks/s in all, so each backend is used about once a second, as
in a fleet that is not overloaded). linux/amd64, 2 CPUs, go1.26.8, unpinned, PostgreSQL 15.

| mode | saturated: locks/s / by key's, median (range) | saturated: server CPU per lock | paced: server CPU per lock / by key's, median (range) | paced: p50 acquire | saturated: found taken (second statement) |
|---|---|---|---|---|---|
| by key, prepared (what ` + "`LockKey`" + ` sends) | 1.00x | 398 µs | 1.00x (556 µs) | 0.62 ms | |
| by key, prepared, with the library's session settings | 1.02x (0.83x–1.20x) | 389 µs | 1.07x (0.93x–1.29x) | 0.67 ms | |
| named, simple protocol (what ` + "`Lock`" + ` sends where locks are contended, for a name its connection has not prepared) | 0.88x (0.85x–1.16x) | 436 µs | 1.31x (1.06x–1.46x) | 0.78 ms | |
| by key, then the name's comment, pipelined | 0.99x (0.87x–1.18x) | 387 µs | 1.02x (0.82x–1.49x) | 0.65 ms | |
| try by key with the name's comment; if taken, the named wait (what ` + "`Lock`" + ` sends where few locks are found taken) | 0.94x (0.77x–1.09x) | 411 µs | 1.06x (0.80x–1.25x) | 0.63 ms | 39 % |

- **A name costs the parse.** The named statement (the name's comment, which
  pg_stat_activity shows to ` + "`Holders`" + `, ` + "`pgadvisory status`" + ` and anyone looking, and the
  key as a literal) is a text of its own per name, parsed at each use on a connection that
  has not prepared it. With 1,000 backends each used rarely that cost 1.31x the by-key
  statement's server CPU per lock paced (+0.16 ms at the median acquire: the fleet's cost
  question showed the same +0.17 ms) and 0.88x its locks/s saturated.
- **What the library sends where few locks are found taken.** Such a lock is first tried with the key's prepared
  statement, with a statement that is only the name's comment in the same round trip, so
  the holder shows its name; only a lock found taken is waited for with the named
  statement, so that a waiter shows its name too (pin_named.go). Paced, no lock was found
  taken: 1.06x. Saturated, 39 % were, and paid a second round trip: 0.94x against 0.88x
  here, but a second run (5 reps, with the client socket options' row) gave 0.87x against
  0.90x, so saturated the two are within the reps' spread. The second run's paced figures
  agreed with the first: named 1.26x (1.10x–1.44x), tried by key first 1.06x (0.87x–1.13x),
  p50 0.60 ms against 0.51 ms.
- **Where locks are contended, the try loses (measured again on the fleet's machine: AMD
  EPYC, 2 vCPUs, kernel 6.18, 3 reps).** Saturated, with 36 % found taken, the try cost
  98 µs of server and 46 µs of client CPU per lock against the named statement's 94 and
  40 (0.83x and 0.90x the by-key statement's locks/s); paced, with none found taken, 104
  and 211 against 127 and 228 (server 1.07x and 1.30x the by-key statement's). Break-even
  is near one try in ten found taken. So a Manager keeps an average of how often its
  ` + "`Lock`" + ` calls' tries found their locks taken, and past one in ten sends the named
  statement at once, trying first once in eight calls to keep the average current
  (pin_named.go). In the library at fleet scale (10 replicas with the try and 10 without,
  side by side on one server, disjoint names, 50 goroutines each, 20 s windows) skipping
  the try took 1.12–1.22x the locks/s with the hot-key skew and 1.20x uniform, and the
  Manager's average matched skipping it: 1.00x hot, 0.97x uniform. Paced, locks are
  seldom found taken and the try stays, with its lower server CPU.
- **The alternative that costs nothing hides waiters' names.** Sending the blocking
  statement by key with the comment after it reached 0.99x saturated (0.90x in the second
  run) and 1.02x paced (1.05x), but a session waiting for the lock would show the statement
  by key: ` + "`Holders`" + ` and ` + "`pgadvisory status`" + ` could no longer say which name a stuck wait
  waits for, when that is what an operator asks. The library keeps the name on waiters.
  A Manager made ` + "`WithoutNamesInActivity`" + ` sends the statements by key alone, for programs
  that keep names only in the process (the side-by-side fleet above measures it).
- **The session settings cost the server little.** Every lock connection sets the server
  end's keepalive (` + "`tcp_keepalives_*`" + `, ` + "`tcp_user_timeout`" + `), clears four timeouts and sets
  ` + "`client_connection_check_interval`" + ` (1 s: a backend waiting for a lock notices that its
  client died, and is not granted the lock). Saturated 1.02x and 0.96x in the two runs;
  paced 1.07x (0.93x–1.29x) and 1.13x (1.04x–1.43x): about a tenth more server CPU per lock
  when each backend is used about once a second, which fits the check's timer (armed at a
  statement's start, it fires a second later and wakes the backend once more; not
  confirmed apart). The client socket options (keepalive 4 s/2 s/3, ` + "`TCP_USER_TIMEOUT`" + `
  10 s) cost nothing: 0.94x (0.79x–1.56x) saturated, 0.99x paced. The rest of the fleet's
  gap between the library by key and raw pgx is on the client side: per cycle the library
  makes three system calls raw pgx does not (two ` + "`epoll_ctl`" + ` for the loss watcher,
  registering the held connection and removing it before the unlock, and one
  ` + "`MSG_PEEK`" + ` receive on each checkout, which finds a pooled
  connection whose backend ended while it idled; strace of 2,000 cycles on one connection:
  10.5 system calls per cycle against 7.1), and allocates the ` + "`pin`" + ` (504 bytes) that the
  caller's ` + "`Lock`" + ` points into. In the fleet's profiles of the saturated by-key point
  (` + "`BENCH_FLEET_CPUPROFILE`" + `, 20 replicas) those took 3.9 %, 1.6 % and 6.5 % of the
  replicas' samples: each buys a guarantee (the holder is told first; no lock meets a dead
  connection's error; a ` + "`Lock`" + ` stays valid after its Unlock). Those profiles predate
  the armer (issue 24, loss_armer.go): a lock released within a millisecond of its grant now
  makes neither ` + "`epoll_ctl`" + ` (perf stat of one replica, 50 goroutines saturated: 862
  ` + "`epoll_ctl`" + ` calls in 5 s against about 100,000 locks), and the key's statements'
  own path (stop 32, pin_prepared.go), which took pgx's query layer (cache lookup,
  encoding and scan plans, a Rows value per statement) off the lock and unlock statements
  and 6 of a cycle's 11 allocations: side by side, 10 replicas of each build, the new
  build took 1.09-1.17x the old one's locks.

`
