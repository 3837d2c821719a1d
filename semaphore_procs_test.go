package advisory_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// semWorkerEnv makes TestSemaphoreWorkerProcess a worker: "NAME LIMIT GOROUTINES ROUNDS".
const semWorkerEnv = "ADVISORY_SEM_WORKER"

// TestSemaphoreBoundAcrossProcesses runs 3 processes × 10 goroutines, each goroutine
// acquiring a limit-4 semaphore 5 times, while the test samples pg_locks: never more
// than 4 slots held, the bound reached (the test holds 3 slots until it has seen it
// reached), and every goroutine done (none starved).
func TestSemaphoreBoundAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: 3 worker processes")
	}
	t.Parallel()
	const procs, goroutines, rounds, limit = 3, 10, 5, 4
	m := newManager(t, nil)
	s, err := m.Semaphore(t.Name(), limit)
	require.NoError(t, err)
	keys := make([]int64, limit)
	for i, k := range s.SlotKeys() {
		keys[i] = int64(k)
	}
	// The test holds all slots but one until the sampler has seen the bound reached once:
	// the workers' one slot turns over so fast that with all four free a sampler starved
	// of CPU (two busy cores) could miss the moment all four are held, and the bound
	// would look unreached. Then it lets the workers have every slot.
	var mine []*advisory.Lock
	for range limit - 1 {
		l, err := s.Acquire(ctxT(t))
		require.NoError(t, err)
		mine = append(mine, l)
	}
	outs, errs, done := startSemWorkers(t, procs, fmt.Sprintf("%s %d %d %d", t.Name(), limit, goroutines, rounds))
	maxHeld, samples, start := 0, 0, time.Now()
	for finished := false; !finished; {
		select {
		case <-done:
			finished = true
		default:
		}
		require.Less(t, time.Since(start), 2*time.Minute, "workers not done")
		var held int
		require.NoError(t, admin.QueryRow(context.Background(), `
			SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted AND objsubid = 1
			  AND (classid::bigint << 32 | objid::bigint) = ANY($1)`, keys).Scan(&held))
		require.LessOrEqual(t, held, limit, "slots held at once (sample %d)", samples)
		maxHeld, samples = max(maxHeld, held), samples+1
		if held == limit && mine != nil {
			for _, l := range mine {
				require.NoError(t, l.Unlock(ctxT(t)))
			}
			mine = nil
		}
	}
	t.Logf("%d processes × %d goroutines × %d rounds in %v; %d pg_locks samples, at most %d slots held",
		procs, goroutines, rounds, time.Since(start), samples, maxHeld)
	assert.Equal(t, limit, maxHeld, "the bound was reached (the sampler sees holders)")
	for p := range procs {
		require.NoError(t, errs[p], "worker %d: %v", p, outs[p])
		require.Len(t, outs[p], goroutines+1, "worker %d: %v", p, outs[p])
		for _, line := range outs[p][:goroutines] {
			assert.Regexp(t, fmt.Sprintf(`^DONE \d+ %d `, rounds), line, "worker %d", p)
		}
		t.Logf("worker %d: %s", p, outs[p][goroutines])
	}
	requireFree(t, s.TurnstileKey())
}

// startSemWorkers starts procs worker processes (TestSemaphoreWorkerProcess) with spec.
// Each one's stdout lines and exit error are in outs and errs once done is closed.
func startSemWorkers(t *testing.T, procs int, spec string) (outs [][]string, errs []error, done chan struct{}) {
	var wg sync.WaitGroup
	outs, errs = make([][]string, procs), make([]error, procs)
	for p := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestSemaphoreWorkerProcess$")
		cmd.Env = append(os.Environ(), semWorkerEnv+"="+spec)
		cmd.Stderr = os.Stderr
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
		out, err := cmd.StdoutPipe()
		require.NoError(t, err)
		require.NoError(t, cmd.Start())
		t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
		wg.Go(func() {
			sc := bufio.NewScanner(out)
			for sc.Scan() {
				outs[p] = append(outs[p], sc.Text())
			}
			errs[p] = cmd.Wait()
		})
	}
	done = make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	return outs, errs, done
}

// TestSemaphoreWorkerProcess is not a test: it is a worker of
// TestSemaphoreBoundAcrossProcesses (run with semWorkerEnv set). Each goroutine acquires
// the semaphore ROUNDS times, holding it 0-3 ms, then prints "DONE g ROUNDS maxwait".
func TestSemaphoreWorkerProcess(t *testing.T) {
	spec := os.Getenv(semWorkerEnv)
	if spec == "" {
		t.Skip("a helper process of TestSemaphoreBoundAcrossProcesses")
	}
	var name string
	var limit, goroutines, rounds int
	_, err := fmt.Sscan(spec, &name, &limit, &goroutines, &rounds)
	require.NoError(t, err)
	m := newManager(t, nil)
	s, err := m.Semaphore(name, limit)
	require.NoError(t, err)
	ctx := ctxT(t)
	lines := make([]string, goroutines)
	waits := make([]time.Duration, goroutines)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Go(func() {
			n := 0
			for range rounds {
				start := time.Now()
				l, err := s.Acquire(ctx)
				if err != nil {
					lines[g] = "ERROR " + err.Error()
					return
				}
				waits[g] = max(waits[g], time.Since(start))
				n++
				time.Sleep(time.Duration(rand.IntN(3000)) * time.Microsecond)
				if err := l.Unlock(ctx); err != nil {
					lines[g] = "ERROR " + err.Error()
					return
				}
			}
			lines[g] = fmt.Sprintf("DONE %d %d %v", g, n, waits[g].Round(time.Millisecond))
		})
	}
	wg.Wait()
	fmt.Println(strings.Join(lines, "\n"))
	fmt.Printf("longest Acquire per goroutine: %v\n", roundAll(waits))
	os.Stdout.Sync()
	m.Close()
	os.Exit(0) // print nothing more: the parent reads these lines only
}

func roundAll(ds []time.Duration) []time.Duration {
	out := make([]time.Duration, len(ds))
	for i, d := range ds {
		out[i] = d.Round(time.Millisecond)
	}
	return out
}
