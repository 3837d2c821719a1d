package advisory_test

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// handoffHammerEnv makes TestHandoffHammerProcess a hammer: "NAME GOROUTINES MAX BUDGET".
const handoffHammerEnv = "ADVISORY_HANDOFF_HAMMER"

// TestHandoffRemoteWaiterAcrossProcesses: a separate process hammers a key with 8
// goroutines of one Manager (WithLocalHandoff(4, 1m), 1 ms holdings) while this process
// takes the key, without handoff, 5 times. Each time, the hammer begins at most max+1 = 5
// holdings between this call showing as a waiter in pg_locks and its grant, by the
// hammer's own record of when each holding began.
func TestHandoffRemoteWaiterAcrossProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("slow: a hammer process")
	}
	t.Parallel()
	const maxHandoffs, rounds = 4, 5
	name := t.Name()
	key := advisory.KeyOf(name)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHandoffHammerProcess$")
	cmd.Env = append(os.Environ(), fmt.Sprintf("%s=%s 8 %d %d", handoffHammerEnv, name, maxHandoffs, time.Minute))
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) })
	var starts []int64 // when each of the hammer's holdings began (Unix ns), once it exits
	read := make(chan error, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if n, err := strconv.ParseInt(sc.Text(), 10, 64); err == nil {
				starts = append(starts, n)
			}
		}
		read <- cmd.Wait()
	}()

	app := "remote-" + name
	remote := newManager(t, []string{"application_name=" + app})
	ctx := ctxT(t)
	eventually(t, 30*time.Second, func() bool { return len(lockRows(t, key)) > 0 }, "the hammer holding")
	type window struct{ seen, granted int64 }
	var windows []window
	for len(windows) < rounds {
		time.Sleep(20 * time.Millisecond) // let the hammer run
		got := lockAsync(ctx, remote, name)
		var l *advisory.Lock
		eventually(t, 10*time.Second, func() bool {
			select {
			case l = <-got:
				return true
			default:
				return waitingApp(t, key, app)
			}
		}, "the remote call waiting")
		if l != nil { // granted between two runs: nothing to measure
			require.NoError(t, l.Unlock(ctx))
			continue
		}
		seen := time.Now().UnixNano()
		l = <-got
		require.NotNil(t, l)
		windows = append(windows, window{seen, time.Now().UnixNano()})
		requireHeldBy(t, key, l.PID())
		require.NoError(t, l.Unlock(ctx))
	}
	require.NoError(t, stdin.Close()) // the hammer stops, prints when each holding began, exits
	require.NoError(t, <-read)
	require.NotEmpty(t, starts)
	most, longest := 0, time.Duration(0)
	for _, w := range windows {
		longest = max(longest, time.Duration(w.granted-w.seen))
		n := 0
		for _, s := range starts {
			if s > w.seen && s < w.granted {
				n++
			}
		}
		most = max(most, n)
		assert.LessOrEqual(t, n, maxHandoffs+1, "holdings the hammer began while the remote call waited")
	}
	t.Logf("hammer: %d holdings; at most %d began while the remote call waited (bound %d); longest wait from seen waiting to granted %v",
		len(starts), most, maxHandoffs+1, longest)
	requireFree(t, key)
}

// TestHandoffHammerProcess is not a test: it is the hammer of
// TestHandoffRemoteWaiterAcrossProcesses (run with handoffHammerEnv set). Its goroutines
// take the key in turn, holding it 1 ms, until stdin closes; then it prints when each
// holding began (Unix ns), one a line, and exits.
func TestHandoffHammerProcess(t *testing.T) {
	spec := os.Getenv(handoffHammerEnv)
	if spec == "" {
		t.Skip("a helper process of TestHandoffRemoteWaiterAcrossProcesses")
	}
	var name string
	var goroutines, maxHandoffs int
	var budget time.Duration
	_, err := fmt.Sscan(spec, &name, &goroutines, &maxHandoffs, &budget)
	require.NoError(t, err)
	m := newManager(t, []string{"application_name=hammer"}, advisory.WithLocalHandoff(maxHandoffs, budget))
	ctx := ctxT(t)
	stop := make(chan struct{})
	go func() { io.Copy(io.Discard, os.Stdin); close(stop) }()
	var mu sync.Mutex
	var starts []int64
	var inside atomic.Int32
	var wg sync.WaitGroup
	for range goroutines {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				l, err := m.Lock(ctx, name)
				if err != nil {
					fmt.Fprintln(os.Stderr, "hammer:", err)
					os.Exit(1)
				}
				now := time.Now().UnixNano()
				mu.Lock()
				starts = append(starts, now)
				mu.Unlock()
				if inside.Add(1) != 1 {
					fmt.Fprintln(os.Stderr, "hammer: two holders at once")
					os.Exit(1)
				}
				time.Sleep(time.Millisecond)
				inside.Add(-1)
				if err := l.Unlock(ctx); err != nil {
					fmt.Fprintln(os.Stderr, "hammer:", err)
					os.Exit(1)
				}
			}
		})
	}
	wg.Wait()
	m.Close()
	w := bufio.NewWriter(os.Stdout)
	for _, s := range starts {
		fmt.Fprintln(w, s)
	}
	w.Flush()
	os.Exit(0) // print nothing more: the parent reads these lines only
}
