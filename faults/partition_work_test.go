package faults_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// workMarkers holds one row per holding whose work committed: A's is inserted in the
// transaction the partition interrupts, so it must never appear.
const workMarkers = "partition_work_markers"

// workSleep is how long A's work transaction sleeps between its insert and its commit:
// far past the server's release bound, so the work is still running when the lock is
// freed unless its own backend gives up first.
const workSleep = 30 * time.Second

// TestPartitionedHoldersWorkIsGoneBeforeTheNextHolderStarts: holder A, a process in the
// network namespace, holds a lock through Manager.Do and runs its work (a transaction:
// insert a marker, pg_sleep, commit) on a pool tagged with Lock.WorkConfig. The namespace
// is cut while the work's transaction runs. A must be told within its client bound and
// its fn's ctx end; the server frees the lock later; B, outside, already waiting for the
// lock, gets it and drains. Before B's work issues its first statement, no session of A's
// work is left (server-clock spans from an observer, and a count in B's first statement),
// and A's transaction never committed. Whether B's drain terminated A's work backend or
// that backend had ended on its own (its keepalive and client_connection_check_interval
// came with the work's options) depends on the timers' phases and B's drain wait: each
// round says which happened; the invariant holds either way.
func TestPartitionedHoldersWorkIsGoneBeforeTheNextHolderStarts(t *testing.T) {
	ctx := needPartitionLab(t)
	bounds := boundsOf(t, "tight")
	for r, b := range []*nextHolder{
		lockThenDrain(t, "Lock + Drain, drain wait 1 s (default)"),
		lockThenDrain(t, "Lock + Drain, drain wait 0 (terminate at once)", advisory.WithDrainWait(0)),
		doDrains(t, "Manager.Do (drains before fn), drain wait 1 s (default)"),
	} {
		res := workPartitionRound(t, ctx, startPartitionedHolder, b, r)
		logWorkRound(t, r, b, res)
		assertPartitionBounds(t, partitionResult{profile: "tight", told: res.told, freed: res.freed, bounds: bounds})
	}
}

// needPartitionLab skips (fails under CI) without the namespace, makes sure the partition
// is healed when the test ends, creates the marker table and returns the test's ctx.
func needPartitionLab(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("-short: a slow fault test (tens of seconds); CI runs it")
	}
	if netLab == nil {
		if pgtest.InCI() {
			t.Fatalf("the partition test must run in CI: %v", labErr)
		}
		t.Skipf("skipped: %v", labErr)
	}
	ctx := ctxT(t, 5*time.Minute)
	t.Cleanup(func() { require.NoError(t, netLab.heal(), "the partition's rules are removed") })
	_, err := admin.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+workMarkers+
		" (holder text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())")
	require.NoError(t, err)
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+workMarkers) })
	return ctx
}

func logWorkRound(t *testing.T, r int, b *nextHolder, res workRound) {
	t.Logf("round %d, B by %s: told %.2fs, freed %.2fs; drain took %v: A's work backend %s; "+
		"B's fn began %v after the grant; A's work last seen %v before B's first statement "+
		"(observer: %d samples, longest gap %v)", r, b.how, res.told.Seconds(), res.freed.Seconds(),
		res.drain.Took, res.outcome, res.fnAfter, res.clearance, res.samples, res.maxGap)
}

// workRound is what one round measured.
type workRound struct {
	told, freed time.Duration // after the partition began
	drain       advisory.DrainReport
	outcome     string        // what became of A's work backend
	fnAfter     time.Duration // B's lock granted -> B's fn (or, for Lock, its work) began
	clearance   time.Duration // A's work last seen -> B's first statement (server clock)
	samples     int
	maxGap      time.Duration
}

// workPartitionRound runs one round with holder A from start and B as b.
func workPartitionRound(t *testing.T, ctx context.Context, start func(*testing.T, string) partitionedHolder,
	b *nextHolder, round int) workRound {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	name := fmt.Sprintf("%s/%d", t.Name(), round)
	t.Logf("round %d seed %d", round, seed)
	obs := startWorkObserver(t)
	a := start(t, name)
	t.Logf("round %d: A's work session %d: %s", round, a.workPID, a.settings)
	took := b.takeOver(ctx, name, a.tag)
	require.Eventually(t, func() bool { return waiters(t, advisory.KeyOf(name)) == 1 }, 10*time.Second, time.Millisecond)
	// Vary the keepalive timers' phases against the moment of the cut.
	time.Sleep(time.Duration(rng.IntN(2000)) * time.Millisecond)
	t0 := time.Now()
	require.NoError(t, netLab.partition())

	var res workRound
	res.told = a.told(t).Sub(t0)
	var bRes takeOver
	select {
	case bRes = <-took:
	case <-time.After(60 * time.Second):
		t.Fatal("B did not take over within 60 s of the partition")
	}
	require.NoError(t, bRes.err, "B")
	a.done(t)
	require.NoError(t, netLab.heal())
	obs.stop()

	res.freed, res.drain, res.fnAfter = bRes.grantAt.Sub(t0), bRes.drain, bRes.fnAt.Sub(bRes.grantAt)
	assert.Zero(t, bRes.aLeft, "VIOLATION: a session of A's work was running when B's work began")
	res.clearance = judgeWorkSpans(t, obs, a, bRes.bStart)
	res.outcome = drainOutcome(bRes.drain, a.workPID)
	res.samples, res.maxGap = obs.samples, obs.maxGap
	var committed int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+workMarkers+" WHERE holder = $1", a.tag).Scan(&committed))
	assert.Zero(t, committed, "VIOLATION: A's partitioned work committed")
	return res
}

// judgeWorkSpans asserts that every session of A's work was last seen before B's work
// began and returns by how much (the smallest gap).
func judgeWorkSpans(t *testing.T, obs *workObserver, a partitionedHolder, bStart time.Time) time.Duration {
	t.Helper()
	spans := obs.tagged(a.tag)
	seenWork := false
	clearance := time.Duration(1<<63 - 1)
	for _, s := range spans {
		seenWork = seenWork || s.pid == a.workPID
		overlap := max(0, s.last.Sub(bStart))
		assert.Zero(t, overlap, "VIOLATION: A's work session %d (%q) seen %v after B's work began", s.pid, s.app, overlap)
		clearance = min(clearance, bStart.Sub(s.last))
	}
	require.True(t, seenWork, "the observer saw A's work session %d", a.workPID)
	return clearance
}

// drainOutcome says what became of A's work backend: terminated by B's drain, ended on
// its own while the drain waited, or gone before the drain looked.
func drainOutcome(rep advisory.DrainReport, workPID uint32) string {
	for _, s := range rep.Sessions {
		switch {
		case s.PID != workPID:
		case s.Terminated:
			return fmt.Sprintf("terminated by the drain (gone %v after it began)", s.After)
		default:
			return fmt.Sprintf("ended on its own during the drain (%v after it began)", s.After)
		}
	}
	return "had ended on its own before the drain"
}
