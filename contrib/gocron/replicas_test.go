package advgocron_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestReplicas runs three processes, each with a real gocron scheduler firing the same job
// every 2 s on the wall clock, distributed by the Locker or the Elector; replica n tries
// the lock, or asks whether it leads, n*skewStep late. Halfway through, the replica that
// ran the latest occurrence is SIGKILLed. At the end the replicas shut down gracefully,
// the one that ran the last occurrence first, during its hold (the Locker's atLeast, the
// Elector's hold). Every occurrence must run exactly once across the replicas, none may
// be missed, and every other live replica must have fired it too and skipped.
func TestReplicas(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: three scheduler processes for about 25 s")
	}
	for _, mode := range []string{"locker", "elector"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			testReplicas(t, mode)
		})
	}
}

// replica is one running replica process.
type replica struct {
	n     int
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

// stop closes the replica's stdin (it shuts its scheduler down and exits) and waits.
func (r *replica) stop(t *testing.T) error {
	t.Helper()
	r.stdin.Close()
	done := make(chan error, 1)
	go func() { done <- r.cmd.Wait() }()
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		r.cmd.Process.Kill()
		<-done
		return fmt.Errorf("replica %d did not stop within 30 s", r.n)
	}
}

func startReplica(t *testing.T, n int, mode, table string) *replica {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envReplica+"="+fmt.Sprint(n), envDSN+"="+dsn(t), envMode+"="+mode, envTable+"="+table,
		"GORACE=atexit_sleep_ms=0") // a -race binary otherwise sleeps 1 s as it exits
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := &replica{n: n, cmd: cmd, stdin: stdin}
	t.Cleanup(func() { r.stdin.Close(); r.cmd.Process.Kill() })
	ready := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(stdout).ReadString('\n')
		ready <- line
		io.Copy(io.Discard, stdout)
	}()
	select {
	case line := <-ready:
		require.Equal(t, "ready\n", line, "replica %d", n)
	case <-time.After(60 * time.Second):
		t.Fatalf("replica %d not ready within 60 s", n)
	}
	return r
}

func testReplicas(t *testing.T, mode string) {
	ctx := ctxT(t)
	table := "gocron_runs_" + mode
	_, err := admin.Exec(ctx, fmt.Sprintf(`DROP TABLE IF EXISTS %[1]s; CREATE TABLE %[1]s (
		occurrence timestamptz, replica int, kind text, at timestamptz DEFAULT clock_timestamp())`, table))
	require.NoError(t, err)
	var rs []*replica
	for n := range 3 {
		rs = append(rs, startReplica(t, n, mode, table))
	}
	windowStart := time.Now()
	waitRuns(t, table, windowStart, 5)
	killedOcc, killed := killLatest(t, table, rs)
	waitRuns(t, table, killedOcc.Add(interval), 5)
	// A graceful shutdown right after an occurrence: the replica that ran it first, in
	// its hold while the others' tries, later by skewStep, are still to come; the others
	// once they have tried (each records a run or a skip).
	lastOcc, runner := latestRun(t, table)
	order := []*replica{rs[runner]}
	for _, r := range rs {
		if r.n != killed && r.n != runner {
			order = append(order, r)
		}
	}
	for i, r := range order {
		began := time.Now()
		require.NoError(t, r.stop(t), "replica %d exit", r.n)
		t.Logf("replica %d stopped at %s in %v", r.n, time.Now().Format("05.000"), time.Since(began).Round(time.Millisecond))
		if i == 0 {
			eventually(t, 30*time.Second, func() bool {
				var tried int
				require.NoError(t, admin.QueryRow(context.Background(), fmt.Sprintf(
					`SELECT count(DISTINCT replica) FROM %s WHERE occurrence = $1`, table), lastOcc).Scan(&tried))
				return tried == len(order)
			}, "every live replica tried the last occurrence")
		}
	}
	checkOccurrences(t, table, mode, windowStart, killedOcc, killed)
}

// waitRuns waits until n occurrences at or after since have run.
func waitRuns(t *testing.T, table string, since time.Time, n int) {
	t.Helper()
	eventually(t, time.Duration(n)*interval+30*time.Second, func() bool {
		var got int
		require.NoError(t, admin.QueryRow(context.Background(), fmt.Sprintf(
			`SELECT count(DISTINCT occurrence) FROM %s WHERE kind = 'run' AND occurrence >= $1`, table), since).Scan(&got))
		return got >= n
	}, fmt.Sprintf("%d runs since %v", n, since))
}

// killLatest SIGKILLs the replica that ran the latest occurrence, halfway to the next one
// (so no replica's timer is due), and returns that occurrence and the replica's number.
func killLatest(t *testing.T, table string, rs []*replica) (time.Time, int) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); {
		occ, who := latestRun(t, table)
		time.Sleep(time.Until(occ.Add(interval / 2)))
		if again, _ := latestRun(t, table); again.Equal(occ) && time.Now().Before(occ.Add(interval*3/4)) {
			require.NoError(t, rs[who].cmd.Process.Kill())
			rs[who].cmd.Wait()
			t.Logf("SIGKILLed replica %d, which ran the occurrence at %s", who, occ.Format("15:04:05"))
			return occ, who
		}
		time.Sleep(interval / 4) // late: try again after the next occurrence
	}
	t.Fatal("no moment halfway between two occurrences within 30 s")
	return time.Time{}, 0
}

// latestRun returns the latest occurrence run and the replica that ran it.
func latestRun(t *testing.T, table string) (occ time.Time, who int) {
	t.Helper()
	require.NoError(t, admin.QueryRow(context.Background(), fmt.Sprintf(
		`SELECT occurrence, replica FROM %s WHERE kind = 'run' ORDER BY occurrence DESC LIMIT 1`, table)).Scan(&occ, &who))
	return occ, who
}

// occurrence is what the replicas recorded for one occurrence.
type occurrence struct {
	At       time.Time
	Runs     int
	Skips    int
	Runners  []int
	Lateness time.Duration // of the run, after the occurrence's time
}

func checkOccurrences(t *testing.T, table, mode string, windowStart, killedOcc time.Time, killed int) {
	t.Helper()
	rows, err := admin.Query(context.Background(), fmt.Sprintf(`
		SELECT occurrence, count(*) FILTER (WHERE kind = 'run'), count(*) FILTER (WHERE kind = 'skip'),
		       coalesce(array_agg(replica) FILTER (WHERE kind = 'run'), '{}'),
		       coalesce(max(at - occurrence) FILTER (WHERE kind = 'run'), '0')
		FROM %s GROUP BY occurrence ORDER BY occurrence`, table))
	require.NoError(t, err)
	occs, err := pgx.CollectRows(rows, pgx.RowToStructByPos[occurrence])
	require.NoError(t, err)
	require.NotEmpty(t, occs)

	perReplica := map[int]int{}
	var maxLate time.Duration
	// The first occurrence counted comes at least interval/2 after every replica said it
	// was ready, so that every scheduler (and the Elector's first leader) is surely armed.
	first := windowStart.Add(interval / 2).Truncate(interval).Add(interval)
	// The last counted is the last run: after it the replicas shut down, and a timer that
	// fires meanwhile finds its scheduler stopping (a skip, or nothing).
	last, _ := latestRun(t, table)
	byTime := map[time.Time]occurrence{}
	for _, o := range occs {
		byTime[o.At] = o
		require.LessOrEqual(t, o.Runs, 1, "occurrence %s ran %d times, by %v", o.At, o.Runs, o.Runners)
		for _, r := range o.Runners {
			perReplica[r]++
		}
		maxLate = max(maxLate, o.Lateness)
	}
	var lines []string
	for at := first; !at.After(last); at = at.Add(interval) {
		o := byTime[at]
		require.Equal(t, 1, o.Runs, "occurrence %s: runs", at.Format("15:04:05"))
		if at.Before(last) { // the last one's skips may not be written yet
			live := 3
			if at.After(killedOcc) {
				live = 2
			}
			require.Equal(t, live-1, o.Skips, "occurrence %s: skips (%d replicas alive)", at.Format("15:04:05"), live)
		}
		lines = append(lines, fmt.Sprintf("%s:%v", at.Format("05"), o.Runners))
	}
	after := byTime[killedOcc.Add(interval)]
	require.NotContains(t, after.Runners, killed, "the killed replica ran after its death")
	t.Logf("%s: %d occurrences each ran once (second:[replica] %s); runs per replica %v; replica %d killed after %s; max lateness of a run %v",
		mode, len(lines), strings.Join(lines, " "), perReplica, killed, killedOcc.Format("15:04:05"), maxLate)
}
