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
)

// workMarkers holds one row per holding whose work committed: A's is inserted in the
// transaction the partition interrupts, so it must never appear.
const workMarkers = "partition_work_markers"

// workSleep is how long A's work transaction sleeps between its insert and its commit:
// far past the server's release bound, so the work is still running when the lock is
// freed unless its own backend gives up first. The untagged control's work sleeps
// untaggedWorkSleep: it commits while the next holder works.
const workSleep, untaggedWorkSleep = 30 * time.Second, 16 * time.Second

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
// takeover says which happened; the invariant holds either way. Each of the 3 rounds cuts
// 4 such pairs at once: one for each way B drains, and a control B that does not drain,
// whose overlap with A's work is measured, not judged (it is what the drain prevents).
// Round 0 adds the control of the time before work fencing: A's work untagged and without
// the settings, which B's drain cannot find and which commits while B works.
func TestPartitionedHoldersWorkIsGoneBeforeTheNextHolderStarts(t *testing.T) {
	ctx := needPartitionLab(t)
	bounds := boundsOf(t, "tight")
	for r := 0; r < 3; r++ {
		pairs := pairsOfEachKind(t, startPartitionedHolder)
		if r == 0 {
			pairs = append(pairs, workPair{startUntaggedHolder,
				lockThenDrain(t, "Lock + Drain, A's work untagged (control: before work fencing)")})
		}
		for i, res := range workPartitionRound(t, ctx, r, pairs) {
			logWorkRound(t, r, pairs[i].b, res)
			assertPartitionBounds(t, partitionResult{profile: "tight", told: res.told, freed: res.freed, bounds: bounds})
		}
	}
}

// workPair is a holder A, started by start, and the B that waits to take over from it.
type workPair struct {
	start func(t *testing.T, name string) partitionedHolder
	b     *nextHolder
}

// pairsOfEachKind pairs As from start with a B of each kind: Lock then Drain with the
// default drain wait, with none (terminate at once), and Manager.Do; and with the
// control, a B that does not drain.
func pairsOfEachKind(t *testing.T, start func(*testing.T, string) partitionedHolder) []workPair {
	return []workPair{
		{start, lockThenDrain(t, "Lock + Drain, drain wait 1 s (default)")},
		{start, lockThenDrain(t, "Lock + Drain, drain wait 0 (terminate at once)", advisory.WithDrainWait(0))},
		{start, doDrains(t, "Manager.Do (drains before fn), drain wait 1 s (default)")},
		{start, lockNoDrain(t)},
	}
}

// needPartitionLab skips (fails under CI) without the namespace, makes sure the partition
// is healed when the test ends, creates the marker table and returns the test's ctx.
func needPartitionLab(t *testing.T) context.Context {
	t.Helper()
	needNet(t, netLab != nil, labErr, true)
	networkLane.join(t)
	ctx := ctxT(t, 5*time.Minute)
	t.Cleanup(func() { require.NoError(t, netLab.heal(), "the partition's rules are removed") })
	_, err := admin.Exec(ctx, "CREATE TABLE IF NOT EXISTS "+workMarkers+
		" (holder text NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())")
	require.NoError(t, err)
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+workMarkers) })
	return ctx
}

// logWorkRound logs one takeover. The server runs on this machine: its clock_timestamp()
// and the test's time.Now() read the same clock, so the timeline mixes them.
func logWorkRound(t *testing.T, r int, b *nextHolder, res workRound) {
	t.Logf("round %d, B by %s: told %.2fs, freed %.2fs; drain took %v: A's work backend %s; "+
		"B's fn began %v after the grant (observer: %d samples, longest gap %v)", r, b.how, res.told.Seconds(),
		res.freed.Seconds(), res.drain.Took, res.outcome, res.fnAfter, res.samples, res.maxGap)
	if res.committed != 0 {
		t.Logf("round %d: A's untagged work committed %v after B's first statement (which found %d of its sessions)",
			r, res.committed, res.aLeft)
		return
	}
	t.Logf("round %d timeline after the cut: A told %+.3fs; A's work seen from %+.3fs, running at %+.3fs, "+
		"gone by %+.3fs; B granted %+.3fs; B's fn %+.3fs; B's first statement %+.3fs", r, res.told.Seconds(),
		res.workFirst.Seconds(), res.workAlive.Seconds(), res.workGone.Seconds(), res.freed.Seconds(),
		(res.freed + res.fnAfter).Seconds(), res.bFirst.Seconds())
	t.Logf("round %d overlap of A's work with B's: %v to %v; B's first statement found %d of A's sessions",
		r, res.overlapMin, res.overlapMax, res.aLeft)
}

// workRound is what one takeover measured.
type workRound struct {
	told, freed time.Duration // after the partition began
	drain       advisory.DrainReport
	outcome     string        // what became of A's work backend
	fnAfter     time.Duration // B's lock granted -> B's fn (or, for Lock, its work) began
	samples     int
	maxGap      time.Duration
	// On the server's clock, after the cut: when the observer first saw A's work session,
	// last saw it running (a lower bound of its end) and saw it gone (an upper bound), and
	// B's first statement (when it had found no session of A's work left).
	workFirst, workAlive, workGone, bFirst time.Duration
	// How long A's work session ran on after B's first statement: at least, at most (the
	// observer's resolution); and how many of A's sessions that statement counted.
	overlapMin, overlapMax time.Duration
	aLeft                  int
	// The untagged control: when its work committed, after B's first statement.
	committed time.Duration
}

// workPartitionRound starts each pair's A in the namespace (staggered, so that keepalive
// timers run at different phases) with its B waiting, cuts the namespace once, and judges
// every takeover.
func workPartitionRound(t *testing.T, ctx context.Context, round int, pairs []workPair) []workRound {
	seed := uint64(time.Now().UnixNano())
	rng := rand.New(rand.NewPCG(seed, uint64(round)))
	t.Logf("round %d seed %d", round, seed)
	obs := startWorkObserver(t)
	as := make([]partitionedHolder, len(pairs))
	took := make([]<-chan takeOver, len(pairs))
	for i, p := range pairs {
		name := fmt.Sprintf("%s/%d/%d", t.Name(), round, i)
		as[i] = p.start(t, name)
		t.Logf("round %d: A%d's work session %d: %s", round, i, as[i].workPID, as[i].settings)
		took[i] = p.b.takeOver(ctx, name, as[i].tag)
		require.Eventually(t, func() bool { return waiters(t, advisory.KeyOf(name)) == 1 }, 10*time.Second, time.Millisecond)
		time.Sleep(time.Duration(rng.IntN(1500)) * time.Millisecond)
	}
	t0 := time.Now()
	require.NoError(t, netLab.partition())
	res := make([]workRound, len(pairs))
	for i, a := range as {
		res[i].told = a.told(t).Sub(t0) // the time its line arrived, whenever it is read
	}
	bs := make([]takeOver, len(pairs))
	for i := range bs {
		select {
		case bs[i] = <-took[i]:
		case <-time.After(60 * time.Second):
			t.Fatalf("B%d did not take over within 60 s of the partition", i)
		}
		require.NoError(t, bs[i].err, "B%d", i)
	}
	for i, a := range as {
		if a.untagged {
			res[i].committed = waitCommitted(t, a).Sub(bs[i].bStart)
		} else {
			waitWorkGone(t, a) // the control's, left to end on its own (no later than the drained ones)
		}
		a.done(t)
	}
	require.NoError(t, netLab.heal())
	obs.stop()
	for i := range res {
		judgeTakeover(t, ctx, obs, as[i], bs[i], pairs[i].b.noDrain, t0, &res[i])
	}
	return res
}

// waitCommitted waits for the untagged control's work to commit, as nothing stops it,
// and returns when it saw the marker.
func waitCommitted(t *testing.T, a partitionedHolder) time.Time {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(context.Background(),
			"SELECT count(*) FROM "+workMarkers+" WHERE holder = $1", a.tag).Scan(&n))
		return n == 1
	}, untaggedWorkSleep+30*time.Second, 5*time.Millisecond, "the untagged control's work commits")
	return time.Now()
}

// waitWorkGone waits, while the namespace is still cut, until no session of A's work is
// left: the server's keepalive and client_connection_check_interval end it within the
// server's release bound and one check interval after the cut.
func waitWorkGone(t *testing.T, a partitionedHolder) {
	t.Helper()
	require.Eventually(t, func() bool {
		var n int
		require.NoError(t, admin.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE starts_with(application_name, $1)", a.tag).Scan(&n))
		return n == 0
	}, 60*time.Second, 5*time.Millisecond, "A's work sessions end")
}

// judgeTakeover asserts that none of A's work was left when B's work began and that A's
// transaction never committed, and fills in what r records of the takeover.
func judgeTakeover(t *testing.T, ctx context.Context, obs *workObserver, a partitionedHolder, b takeOver,
	control bool, t0 time.Time, r *workRound) {
	t.Helper()
	r.freed, r.drain, r.fnAfter, r.aLeft = b.grantAt.Sub(t0), b.drain, b.fnAt.Sub(b.grantAt), b.aLeft
	r.samples, r.maxGap, r.bFirst = obs.samples, obs.maxGap, b.bStart.Sub(t0)
	if a.untagged {
		r.outcome = "untagged, so not found by the drain (control: before work fencing)"
		assert.Positive(t, r.committed, "the untagged control's work commits after B's work began")
		return
	}
	if !control {
		assert.Zero(t, b.aLeft, "VIOLATION: a session of A's work was running when B's work began")
	}
	work := judgeWorkSpans(t, obs, a, b.bStart, control)
	r.workFirst, r.workAlive, r.workGone = work.first.Sub(t0), work.aliveAt.Sub(t0), work.goneBy.Sub(t0)
	r.outcome = drainOutcome(b.drain, a.workPID)
	r.overlapMin, r.overlapMax = max(0, work.aliveAt.Sub(b.bStart)), max(0, work.goneBy.Sub(b.bStart))
	if control {
		r.outcome = "not drained (control)"
	}
	var committed int
	require.NoError(t, admin.QueryRow(ctx, "SELECT count(*) FROM "+workMarkers+" WHERE holder = $1", a.tag).Scan(&committed))
	assert.Zero(t, committed, "VIOLATION: A's partitioned work committed")
}

// judgeWorkSpans checks the observer's record of A's work against B's first statement:
// no sample that began at or after it listed a session of A's work (which would prove an
// overlap; not asserted for the control), and A's work session was seen to end. It
// returns that session's span.
func judgeWorkSpans(t *testing.T, obs *workObserver, a partitionedHolder, bStart time.Time, control bool) workSpan {
	t.Helper()
	obs.sampledPast(t, bStart)
	var work workSpan
	for _, s := range obs.tagged(a.tag) {
		if s.pid == a.workPID {
			work = s
		}
		assert.True(t, control || s.aliveAt.Before(bStart), "VIOLATION: A's work session %d (%q) was running %v after B's work began",
			s.pid, s.app, s.aliveAt.Sub(bStart))
	}
	require.Equal(t, a.workPID, work.pid, "the observer saw A's work session")
	require.False(t, work.goneBy.IsZero(), "the observer saw A's work session %d end", work.pid)
	return work
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
