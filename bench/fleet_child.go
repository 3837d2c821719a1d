package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"golang.org/x/sys/unix"

	"github.com/pgadvisory/advisory"
)

// One replica of the fleet: a child process (the bench binary again, roleEnv=fleet) that
// runs spec.Goroutines goroutines taking and releasing locks on spec.Names names for
// spec.Duration, with the library or with raw pgx on a pool of the same size. It prints
// READY when connected, waits for GO on stdin, runs spec.Warmup untimed, then the timed
// window, prints one JSON line (childResult), and exits when stdin closes, so that the
// parent can read the server's memory while every connection is still open.

// implKey is the library called with keys (Manager.LockKey of the name's key) instead of
// names: the same locks, but every lock statement is one text, prepared once per
// connection, where a name's statement carries the name (see docs/keys.md).
const implKey = "advisory LockKey"

// implNoNames is the library called with names by a Manager made WithoutNamesInActivity:
// the statements LockKey sends, the names kept in the process.
const implNoNames = "advisory WithoutNamesInActivity"

// childSpec is what the parent asks of one replica (passed as JSON in fleetSpecEnv).
type childSpec struct {
	Impl       string        // "advisory", implKey, implNoNames, implShared, implParked, implBudget, implBudgetNoNames, or a raw one (isRaw)
	Goroutines int           // concurrent callers
	Names      int           // lock names, fleet/0 … fleet/Names-1
	Hot        bool          // 90 % of calls on the first 10 % of the names
	Conns      int           // pool size (pool_max_conns / MaxConns)
	Warmup     time.Duration // untimed, after GO
	Duration   time.Duration // timed
	Hold       time.Duration // work under the lock: the holder sleeps this long before it releases
	Rate       float64       // paced: this replica's locks/s, spread evenly over its goroutines; 0: as fast as each can
	Seed       uint64
	DSNExtra   string // appended to the library's connection string (an experiment's settings)
	// Prefix names the locks Prefix/0 … Prefix/Names-1 ("fleet" when empty): replicas
	// given different prefixes lock disjoint names, so that two groups run side by side
	// share the server and the CPUs but contend for no lock.
	Prefix string
	Waits  int // implParked's WithWaitSessions bound
}

// childResult is what a replica reports for its timed window.
type childResult struct {
	Locks      int64          `json:"locks"`
	Errors     int64          `json:"errors"`
	FirstError string         `json:"first_error,omitempty"`
	CPU        time.Duration  `json:"cpu"` // user + system of the whole process, timed window
	Hist       map[int]uint64 `json:"hist"`
	PerSecond  []int64        `json:"per_second"` // locks taken in each second from GO, warm-up included
}

const fleetSpecEnv = "ADVISORY_BENCH_FLEET"

// latency histogram: log buckets 2 % wide, from 1 µs.
const histBase = 1.02

func histBucket(d time.Duration) int {
	us := float64(d) / float64(time.Microsecond)
	if us < 1 {
		return 0
	}
	return int(math.Log(us) / math.Log(histBase))
}

// histValue returns a bucket's middle, in ms.
func histValue(b int) float64 { return math.Pow(histBase, float64(b)+0.5) / 1000 }

// locker is one implementation of "take the lock on name, then release it".
type locker func(ctx context.Context, name string, acquired func()) error

func runFleetChild() int {
	var spec childSpec
	if err := json.Unmarshal([]byte(os.Getenv(fleetSpecEnv)), &spec); err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	ctx := context.Background()
	lock, closeFn, err := newLocker(ctx, spec, os.Getenv("BENCH_DSN"))
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer closeFn()
	if spec.Impl != implRawOnDemand { // it opens connections as the traffic needs them
		if err := openAll(ctx, spec, lock); err != nil {
			fmt.Println("ERROR", err)
			return 1
		}
	}
	fmt.Println("READY")
	in := bufio.NewScanner(os.Stdin)
	if !in.Scan() {
		return 1
	}
	if path := os.Getenv("BENCH_FLEET_CPUPROFILE"); path != "" { // a profiling aid: one file per replica
		if f, err := os.Create(fmt.Sprintf("%s.%s.%d", path, spec.Impl, os.Getpid())); err == nil {
			pprof.StartCPUProfile(f)
			defer f.Close()
		}
	}
	res := fleetWork(ctx, spec, lock)
	pprof.StopCPUProfile()
	b, _ := json.Marshal(res)
	fmt.Println(string(b))
	for in.Scan() { // until the parent closes stdin
	}
	return 0
}

func newLocker(ctx context.Context, spec childSpec, dsn string) (locker, func(), error) {
	if !isRaw(spec.Impl) {
		var opts []advisory.Option
		if spec.Impl == implNoNames || spec.Impl == implBudgetNoNames {
			opts = append(opts, advisory.WithoutNamesInActivity())
		}
		switch spec.Impl {
		case implShared, implBudget, implBudgetNoNames:
			opts = append(opts, advisory.WithSharedSessions(sharedPerSession))
		case implParked:
			opts = append(opts, advisory.WithSharedSessions(sharedPerSession), advisory.WithWaitSessions(spec.Waits))
		}
		m, err := advisory.New(ctx, fmt.Sprintf("%s pool_max_conns=%d %s", dsn, spec.Conns, spec.DSNExtra), opts...)
		if err != nil {
			return nil, nil, err
		}
		byKey := spec.Impl == implKey
		return func(ctx context.Context, name string, acquired func()) error {
			var l *advisory.Lock
			var err error
			if byKey {
				l, err = m.LockKey(ctx, advisory.KeyOf(name)) // the statements carry no name: one text for every key
			} else {
				l, err = m.Lock(ctx, name)
			}
			if err != nil {
				return err
			}
			acquired()
			return l.Unlock(ctx)
		}, m.Close, nil
	}
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, nil, err
	}
	cfg.MaxConns = int32(spec.Conns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, nil, err
	}
	return func(ctx context.Context, name string, acquired func()) error {
		return rawLockUnlock(ctx, pool, int64(advisory.KeyOf(name)), acquired)
	}, pool.Close, nil
}

// openAll makes the pool open all its connections before the timed run (a fleet that
// starts cold spends its first seconds forking backends, not locking): spec.Conns
// callers each take a lock on a name of their own, two connecting at a time, and hold it
// until all hold one.
func openAll(ctx context.Context, spec childSpec, lock locker) error {
	all := make(chan struct{})
	sem := make(chan struct{}, 2)
	var held, done sync.WaitGroup
	errs := make(chan error, spec.Conns)
	for i := 0; i < spec.Conns; i++ {
		held.Add(1)
		done.Add(1)
		go func(i int) {
			defer done.Done()
			sem <- struct{}{}
			once := sync.OnceFunc(func() { <-sem; held.Done() })
			err := lock(ctx, fmt.Sprintf("fleet-open/%d/%d", spec.Seed, i), func() { once(); <-all })
			once()
			if err != nil {
				errs <- err
			}
		}(i)
	}
	held.Wait()
	close(all)
	done.Wait()
	close(errs)
	return <-errs
}

// rawLockUnlock is what a program without the library writes: a pooled connection,
// pg_advisory_lock, pg_advisory_unlock on the same connection, back to the pool.
func rawLockUnlock(ctx context.Context, pool *pgxpool.Pool, key int64, acquired func()) error {
	c, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	if _, err := c.Exec(ctx, "select pg_advisory_lock($1)", key); err != nil {
		c.Release()
		return err
	}
	acquired()
	var ok bool
	err = c.QueryRow(ctx, "select pg_advisory_unlock($1)", key).Scan(&ok)
	if err == nil && !ok {
		err = fmt.Errorf("unlock of %d: not held", key)
	}
	c.Release()
	return err
}

// fleetWork runs the goroutines through the warm-up and the timed window.
func fleetWork(ctx context.Context, spec childSpec, lock locker) childResult {
	start := time.Now()
	timedFrom, until := start.Add(spec.Warmup), start.Add(spec.Warmup+spec.Duration)
	var (
		mu     sync.Mutex
		res    = childResult{Hist: map[int]uint64{}}
		locks  atomic.Int64
		errs   atomic.Int64
		wg     sync.WaitGroup
		cpu0   time.Duration
		cpuSet sync.Once
		perSec = make([]atomic.Int64, int((spec.Warmup+spec.Duration)/time.Second)+2)
	)
	for g := 0; g < spec.Goroutines; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(spec.Seed, uint64(g)))
			hist := map[int]uint64{}
			pace := newPacer(spec, g, start)
			for {
				pace.wait()
				t0 := time.Now()
				if t0.After(until) {
					break
				}
				if t0.After(timedFrom) {
					cpuSet.Do(func() { cpu0 = processCPU() })
				}
				timed := t0.After(timedFrom)
				err := lock(ctx, pickName(rng, spec), func() {
					if timed {
						hist[histBucket(time.Since(t0))]++
					}
					if spec.Hold > 0 {
						time.Sleep(spec.Hold)
					}
				})
				switch {
				case err != nil && timed:
					errs.Add(1)
					mu.Lock()
					if res.FirstError == "" {
						res.FirstError = err.Error()
					}
					mu.Unlock()
					time.Sleep(10 * time.Millisecond) // a failing server: do not spin
				case err == nil && timed:
					locks.Add(1)
				}
				if sec := int(time.Since(start) / time.Second); err == nil && sec < len(perSec) {
					perSec[sec].Add(1)
				}
			}
			mu.Lock()
			for b, n := range hist {
				res.Hist[b] += n
			}
			mu.Unlock()
		}(g)
	}
	wg.Wait()
	res.Locks, res.Errors, res.CPU = locks.Load(), errs.Load(), processCPU()-cpu0
	for i := range perSec {
		res.PerSecond = append(res.PerSecond, perSec[i].Load())
	}
	return res
}

// pickName draws a name: uniform, or with Hot 90 % of draws among the first 10 %.
func pickName(rng *rand.Rand, spec childSpec) string {
	n := spec.Names
	hot := max(n/10, 1)
	var i int
	switch {
	case !spec.Hot || n < 2:
		i = rng.IntN(n)
	case rng.Float64() < 0.9:
		i = rng.IntN(hot)
	default:
		i = hot + rng.IntN(n-hot)
	}
	return cmp.Or(spec.Prefix, "fleet") + "/" + strconv.Itoa(i)
}

// processCPU is this process's user + system time so far.
func processCPU() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
