package faults_test

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// staleTrials is how many times TestStaleHolderWritesAreRefused runs its schedule (about
// a second each); -short runs staleTrialsShort.
const staleTrials, staleTrialsShort = 20, 4

// TestStaleHolderWritesAreRefused is the stalled-holder fault: holder A, a separate
// process, takes the lock and its fencing token and is stopped (SIGSTOP) while an
// operator ends its session (pg_terminate_backend); B takes the lock and a newer token
// and writes. A is resumed and at once writes three ways: through BeginFunc on its lock
// (refused: ErrLockLost), on a plain connection after CheckToken (refused:
// ErrStaleToken), and on a plain connection without a check, the unfenced control, which
// writes a stale row. Every step waits for an observed state (process stopped, lock
// granted to B, A's report), never for a fixed time.
func TestStaleHolderWritesAreRefused(t *testing.T) {
	m := newManager(t, "")
	ctx := ctxT(t, 5*time.Minute)
	trials := staleTrials
	if testing.Short() {
		trials = staleTrialsShort
	}
	require.NoError(t, m.CreateFenceTable(ctx))
	_, err := admin.Exec(ctx, "DROP TABLE IF EXISTS "+staleTable+"; CREATE TABLE "+staleTable+
		" (trial int NOT NULL, writer text NOT NULL, token bigint NOT NULL)")
	require.NoError(t, err)
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+staleTable) })

	var fenced, unfenced, seenFirst int
	for i := 0; i < trials; i++ {
		res := staleTrial(t, ctx, m, i)
		rows := staleRows(t, ctx, i)
		fenced += rows[writerTx] + rows[writerToken]
		unfenced += rows[writerPlain]
		if res.seen {
			seenFirst++
		}
		t.Logf("trial %2d: A token %d, B token %d; A saw the loss before writing: %-5v; "+
			"BeginFunc %s, CheckToken %s, unfenced %s; rows %v; A's errors: %s", i, res.tokA, res.tokB, res.seen,
			res.tx, res.token, res.plain, rows, res.details)
		require.Equal(t, "lost", res.tx, "A's BeginFunc: want ErrLockLost: %s", res.details)
		require.Equal(t, "stale", res.token, "A's CheckToken: want ErrStaleToken: %s", res.details)
		require.Equal(t, "ok", res.plain, "the unfenced control writes: %s", res.details)
		require.Zero(t, rows[writerTx]+rows[writerToken], "stale fenced rows in trial %d", i)
		require.Equal(t, 1, rows[writerCurrent], "B's write")
		require.Equal(t, 1, rows[writerPlain], "the unfenced control's stale row")
	}
	t.Logf("stale holder, %d trials: fenced stale rows %d (BeginFunc and CheckToken), unfenced stale rows %d "+
		"(%d of %d trials); A had seen the loss before its write in %d trials, wrote first in %d",
		trials, fenced, unfenced, unfenced, trials, seenFirst, trials-seenFirst)
	assert.Zero(t, fenced)
	assert.Equal(t, trials, unfenced)
}

// staleResult is one trial's outcome, as A reported it.
type staleResult struct {
	tokA, tokB       int64
	seen             bool
	tx, token, plain string
	details          string
}

// staleTrial runs the schedule once: A holds, A stops, A's session ends, B takes the
// lock and writes, A resumes and writes. B keeps the lock until A has reported, and
// checks it still holds it and its token is the newest before unlocking.
func staleTrial(t *testing.T, ctx context.Context, m *advisory.Manager, trial int) staleResult {
	name := t.Name()
	key := advisory.KeyOf(name)
	h := startHelper(t, "stale", map[string]string{"ADVISORY_FAULT_DSN": dsn(t), "ADVISORY_FAULT_KEY": name,
		"ADVISORY_FAULT_TRIAL": strconv.Itoa(trial)})
	ready := strings.Fields(h.expect(t, "READY", 30*time.Second).text)
	pidA, _ := strconv.Atoi(ready[1])
	var res staleResult
	res.tokA, _ = strconv.ParseInt(ready[2], 10, 64)
	require.EqualValues(t, pidA, holderOf(t, key), "A holds the lock")

	require.NoError(t, syscall.Kill(h.cmd.Process.Pid, syscall.SIGSTOP))
	t.Cleanup(func() { syscall.Kill(h.cmd.Process.Pid, syscall.SIGCONT) })
	require.Eventually(t, func() bool { return stopped(h.cmd.Process.Pid) }, 10*time.Second, time.Millisecond)
	var ok bool
	require.NoError(t, admin.QueryRow(ctx, "SELECT pg_terminate_backend($1)", pidA).Scan(&ok))
	require.True(t, ok, "A's session terminated")

	lb, err := m.Lock(ctx, name) // granted once A's backend has exited
	require.NoError(t, err)
	res.tokB, err = lb.Token(ctx)
	require.NoError(t, err)
	require.Greater(t, res.tokB, res.tokA)
	require.NoError(t, lb.BeginFunc(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+staleTable+" (trial, writer, token) VALUES ($1, $2, $3)",
			trial, writerCurrent, res.tokB)
		return err
	}))

	_, err = h.stdin.Write([]byte("WRITE\n")) // in the pipe before A runs again
	require.NoError(t, err)
	require.NoError(t, syscall.Kill(h.cmd.Process.Pid, syscall.SIGCONT))
	parseStale(t, h, &res)

	require.EqualValues(t, lb.PID(), holderOf(t, key), "B still holds the lock")
	require.NoError(t, pgx.BeginFunc(ctx, admin, func(tx pgx.Tx) error {
		return m.CheckToken(ctx, tx, name, res.tokB)
	}), "B's token is still the newest")
	require.NoError(t, lb.Unlock(ctx))
	return res
}

// parseStale reads A's RESULT line and the DETAIL lines that follow, until A exits.
func parseStale(t *testing.T, h *helper, res *staleResult) {
	f := strings.Fields(h.expect(t, "RESULT", 30*time.Second).text)
	require.Len(t, f, 5)
	res.seen, res.tx, res.token, res.plain = f[1] == "true", f[2], f[3], f[4]
	var details []string
	for l := range h.lines {
		details = append(details, strings.TrimPrefix(l.text, "DETAIL "))
	}
	res.details = strings.Join(details, "; ")
	<-h.exit
	require.Zero(t, h.cmd.ProcessState.ExitCode(), "A exits cleanly")
}

// staleRows counts the rows of trial in staleTable by writer.
func staleRows(t *testing.T, ctx context.Context, trial int) map[string]int {
	rows, err := admin.Query(ctx, "SELECT writer, count(*) FROM "+staleTable+" WHERE trial = $1 GROUP BY writer", trial)
	require.NoError(t, err)
	out := map[string]int{}
	for rows.Next() {
		var w string
		var n int
		require.NoError(t, rows.Scan(&w, &n))
		out[w] = n
	}
	require.NoError(t, rows.Err())
	return out
}

// stopped reports whether every thread of process pid is in the stopped state.
func stopped(pid int) bool {
	tasks, err := filepath.Glob("/proc/" + strconv.Itoa(pid) + "/task/*/stat")
	if err != nil || len(tasks) == 0 {
		return false
	}
	for _, f := range tasks {
		b, err := os.ReadFile(f)
		if err != nil {
			return false
		}
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 || i+2 >= len(s) || (s[i+2] != 'T' && s[i+2] != 't') {
			return false
		}
	}
	return true
}
