package advisory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestWorkNeverOverlapsRandomized drives Do from several Managers on one key, with fns
// whose tagged work outlives them in random ways: work left running after fn returns (as a
// dead holder's would), the lock's session terminated mid-work while the work ignores the
// loss, ctx ending at random points, random drain waits. Each holding logs its start (its
// first statement after the drain) and each of its transactions logs a row just before
// its COMMIT, in server time. The invariant: between a holding's start and any of its
// commits, no other holding of the key started. Seeded (ADVISORY_WORK_SEED); 8 s (3 s
// under -short, the inner loop: four busy Managers took 8 s of its CPU), or
// ADVISORY_WORK_DURATION.
func TestWorkNeverOverlapsRandomized(t *testing.T) {
	t.Parallel() // its own key and table; the invariant is an order of server times
	seed, duration := workSettings(t)
	t.Logf("seed %d (ADVISORY_WORK_SEED), %v", seed, duration)
	ctx := ctxT(t)
	table := fmt.Sprintf("work_log_%d", rand.Uint32())
	_, err := admin.Exec(ctx, "CREATE TABLE "+table+" (holding text, kind text, at timestamptz)")
	require.NoError(t, err)
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE "+table) })
	r := &workRun{t: t, table: table, key: t.Name(), base: dsn(t)}
	var wg sync.WaitGroup
	// The run lasts duration, and past it (up to a minute more) until a holding has left
	// its work running: on a loaded machine fewer holdings fit in the duration, and the
	// one kind of holding the invariant is about may not have come up yet.
	stop, hardStop := time.Now().Add(duration), time.Now().Add(duration+time.Minute)
	going := func() bool {
		return time.Now().Before(stop) || r.left.Load() == 0 && time.Now().Before(hardStop)
	}
	for i := range 4 {
		rng := rand.New(rand.NewPCG(seed, uint64(i)))
		m := newManager(t, nil, advisory.WithDrainWait(time.Duration(rng.IntN(3))*100*time.Millisecond))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for going() {
				r.holding(m, rng)
			}
		}()
	}
	chaos := rand.New(rand.NewPCG(seed, 99))
	for going() {
		time.Sleep(time.Duration(50+chaos.IntN(300)) * time.Millisecond)
		admin.Exec(ctx, `SELECT pg_terminate_backend(pid) FROM pg_locks WHERE locktype = 'advisory'
			AND granted AND classid = $1 AND objid = $2 AND objsubid = 1`,
			uint32(uint64(advisory.KeyOf(r.key))>>32), uint32(advisory.KeyOf(r.key)))
	}
	wg.Wait()
	r.leaked.Wait()
	r.judge()
}

func workSettings(t *testing.T) (uint64, time.Duration) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ADVISORY_WORK_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	duration := inShort(8*time.Second, 3*time.Second)
	if s := os.Getenv("ADVISORY_WORK_DURATION"); s != "" {
		var err error
		duration, err = time.ParseDuration(s)
		require.NoError(t, err)
	}
	pgtest.Need(t, srv, startErr)
	return seed, duration
}

type workRun struct {
	t                  *testing.T
	table, key, base   string
	n                  atomic.Int64
	leaked             sync.WaitGroup // work left running after its fn returned
	ran, left, ignored atomic.Int64
}

// holding is one Do whose fn does tagged work in one of several ways.
func (r *workRun) holding(m *advisory.Manager, rng *rand.Rand) {
	id := "h" + strconv.FormatInt(r.n.Add(1), 10)
	mode, sleep := rng.IntN(4), time.Duration(rng.IntN(400))*time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(100+rng.IntN(2000))*time.Millisecond)
	defer cancel()
	m.Do(ctx, r.key, func(ctx context.Context) error {
		cfg, err := pgx.ParseConfig(r.base)
		if err != nil {
			return err
		}
		advisory.LockFromContext(ctx).WorkConfig(&cfg.Config)
		c, err := pgx.ConnectConfig(ctx, cfg)
		if err != nil {
			return err // the lock ended, or ctx did
		}
		if _, err := c.Exec(ctx, "INSERT INTO "+r.table+" VALUES ($1, 'start', clock_timestamp())", id); err != nil {
			c.Close(context.Background())
			return err
		}
		r.ran.Add(1)
		work := func(wctx context.Context) {
			defer c.Close(context.Background())
			c.Exec(wctx, fmt.Sprintf("BEGIN; SELECT pg_sleep(%f); INSERT INTO %s VALUES ('%s', 'commit', clock_timestamp()); COMMIT",
				sleep.Seconds(), r.table, id))
		}
		switch mode {
		case 0: // the work ends with fn, as it should
			work(ctx)
		case 1: // fn returns, its work runs on: a holder that died mid-work
			r.left.Add(1)
			r.leaked.Add(1)
			go func() { defer r.leaked.Done(); work(context.Background()) }()
		default: // the work ignores the loss and ctx (runs to its end)
			r.ignored.Add(1)
			work(context.Background())
		}
		return nil
	})
}

// judge checks the invariant on the log.
func (r *workRun) judge() {
	t := r.t
	rows, err := admin.Query(context.Background(), "SELECT holding, kind, at FROM "+r.table+" ORDER BY at")
	require.NoError(t, err)
	type span struct{ start, lastCommit time.Time }
	spans := map[string]*span{}
	var starts []time.Time
	commits := 0
	for rows.Next() {
		var id, kind string
		var at time.Time
		require.NoError(t, rows.Scan(&id, &kind, &at))
		if spans[id] == nil {
			spans[id] = &span{}
		}
		if kind == "start" {
			spans[id].start = at
			starts = append(starts, at)
		} else {
			spans[id].lastCommit, commits = at, commits+1
		}
	}
	require.NoError(t, rows.Err())
	sort.Slice(starts, func(i, j int) bool { return starts[i].Before(starts[j]) })
	for id, s := range spans {
		if s.lastCommit.IsZero() {
			continue
		}
		require.False(t, s.start.IsZero(), "holding %s committed without a start", id)
		for _, other := range starts {
			if other.After(s.start) && other.Before(s.lastCommit) {
				t.Fatalf("holding %s (started %s) committed at %s, after another holding started at %s",
					id, s.start.Format(time.StampMicro), s.lastCommit.Format(time.StampMicro), other.Format(time.StampMicro))
			}
		}
	}
	t.Logf("%d holdings ran work, %d committed, %d left their work running, %d ignored the loss",
		r.ran.Load(), commits, r.left.Load(), r.ignored.Load())
	require.Positive(t, r.left.Load(), "no holding left its work running: the test proved nothing")
}
