package advgocron_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"
	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory"
	advgocron "github.com/pgadvisory/advisory/contrib/gocron"
)

// A replica is this test binary re-executed by TestReplicas: TestMain sees envReplica
// and runs replicaMain instead of the tests. It runs a real gocron scheduler with one job
// every interval, records each run (and, with the Locker, each skip) in a table, and
// stops when its stdin reaches EOF.
const (
	envReplica = "ADVISORY_GOCRON_REPLICA" // the replica's number
	envDSN     = "ADVISORY_GOCRON_DSN"
	envMode    = "ADVISORY_GOCRON_MODE"  // "locker" or "elector"
	envTable   = "ADVISORY_GOCRON_TABLE" // where runs are recorded; also the job's and the lock's name

	interval = 2 * time.Second
	cronSpec = "*/2 * * * * *" // every interval, on the wall clock's even seconds
	atLeast  = time.Second     // the Locker's hold: interval/2 of skew tolerated either side

	// skewStep is how much later than replica n-1's replica n's timer fires, in effect:
	// replica n waits n*skewStep before it tries the lock (the Locker) or asks whether it
	// leads (the Elector), as if its clock ran behind. Real replicas' timers differ by this much (clocks, load); here
	// it makes the order of the tries certain, so that the replica stopped first after
	// the last occurrence is the one that ran it, still in its hold while the others try.
	skewStep = 150 * time.Millisecond
)

func replicaMain() int {
	if err := runReplica(); err != nil {
		fmt.Fprintf(os.Stderr, "replica %s: %v\n", os.Getenv(envReplica), err)
		return 1
	}
	return 0
}

// recorder inserts one row per run or skip, and keeps the first error it meets.
type recorder struct {
	pool     *pgxpool.Pool
	table    string
	replica  string
	stopping atomic.Bool // set before the scheduler's Shutdown cancels the jobs' contexts
	mu       sync.Mutex
	err      error
}

// skip records a skip, gocron having refused a run with err: what the distribution says
// when another replica runs it (want), or, once the replica stops, a cancelled ctx (a tick
// that fired as the scheduler shut down). Any other error is the distribution's failure.
func (r *recorder) skip(err, want error, what string) {
	if !errors.Is(err, want) && !(r.stopping.Load() && errors.Is(err, context.Canceled)) {
		r.fail(fmt.Errorf("%s: %w", what, err))
	}
	r.record("skip")
}

func (r *recorder) record(kind string) {
	// The occurrence the timer fired for: the schedule is on the wall clock, and a replica
	// runs late by far less than the interval.
	occ := time.Now().Truncate(interval)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err := r.pool.Exec(ctx, fmt.Sprintf(`INSERT INTO %s (occurrence, replica, kind) VALUES ($1, $2, $3)`, r.table),
		occ, r.replica, kind)
	r.fail(err)
}

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err == nil {
		r.err = err
	}
}

func runReplica() error {
	ctx := context.Background()
	dsn, table := os.Getenv(envDSN), os.Getenv(envTable)
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer m.Close()
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return err
	}
	defer pool.Close()
	rec := &recorder{pool: pool, table: table, replica: os.Getenv(envReplica)}
	dist, stop, err := distribution(m, os.Getenv(envMode), table, rec)
	if err != nil {
		return err
	}
	stop = sync.OnceValue(stop)
	defer stop()
	s, err := gocron.NewScheduler(dist)
	if err != nil {
		return err
	}
	_, err = s.NewJob(gocron.CronJob(cronSpec, true), gocron.NewTask(func() { rec.record("run") }),
		gocron.WithName(table), gocron.WithEventListeners(gocron.AfterLockError(func(_ uuid.UUID, _ string, err error) {
			rec.skip(err, advisory.ErrLocked, "lock")
		})))
	if err != nil {
		return err
	}
	s.Start()
	fmt.Println("ready")
	io.Copy(io.Discard, os.Stdin) // until the test closes our stdin, or dies
	rec.stopping.Store(true)      // before Shutdown cancels the jobs' contexts
	if err := s.Shutdown(); err != nil {
		return err
	}
	// As the Locker's godoc asks: after the scheduler, before the Manager (deferred).
	if err := stop(); err != nil {
		return err
	}
	return rec.err
}

// distribution returns the scheduler option for mode, and what stops it once the
// scheduler has shut down: the Locker's Close waits for a hold not yet over, so that the
// Manager's Close does not end it early. Replica n's tries come n*skewStep late.
func distribution(m *advisory.Manager, mode, name string, rec *recorder) (gocron.SchedulerOption, func() error, error) {
	n, err := strconv.Atoi(os.Getenv(envReplica))
	if err != nil {
		return nil, nil, err
	}
	skew := time.Duration(n) * skewStep
	switch mode {
	case "locker":
		lk, err := advgocron.NewLocker(m, atLeast)
		if err != nil {
			return nil, nil, err
		}
		return gocron.WithDistributedLocker(skewedLocker{lk, skew}), func() error {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			return lk.Close(ctx)
		}, nil
	case "elector":
		e, err := advgocron.NewElector(m, name, atLeast)
		if err != nil {
			return nil, nil, err
		}
		return gocron.WithDistributedElector(skewedElector{e, skew, rec}), func() error { e.Close(); return nil }, nil
	}
	return nil, nil, fmt.Errorf("unknown mode %q", mode)
}

// wait waits for d, or until ctx ends.
func wait(ctx context.Context, d time.Duration) error {
	select {
	case <-time.After(d):
		return nil
	case <-ctx.Done():
		return context.Cause(ctx)
	}
}

// skewedLocker is a Locker whose tries come late by skew (see skewStep).
type skewedLocker struct {
	*advgocron.Locker
	skew time.Duration
}

func (s skewedLocker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if err := wait(ctx, s.skew); err != nil {
		return nil, err
	}
	return s.Locker.Lock(ctx, key)
}

// skewedElector is an Elector whose answers come late by skew (see skewStep), and that
// records a skip when gocron will skip the run: gocron tells no listener of an Elector's
// refusal, as it does of a Locker's.
type skewedElector struct {
	*advgocron.Elector
	skew time.Duration
	rec  *recorder
}

func (s skewedElector) IsLeader(ctx context.Context) error {
	err := wait(ctx, s.skew)
	if err == nil {
		err = s.Elector.IsLeader(ctx)
	}
	if err != nil {
		s.rec.skip(err, advgocron.ErrNotLeader, "is leader")
	}
	return err
}
