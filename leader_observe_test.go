package advisory_test

import (
	"bufio"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/checkctx"
)

// awaitLeader reads ch until a Leader satisfies cond, and returns it with the time it
// came. It fails the test if none comes within limit or ch is closed.
func awaitLeader(t *testing.T, ch <-chan advisory.Leader, limit time.Duration, what string,
	cond func(advisory.Leader) bool) (advisory.Leader, time.Time) {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case ld, ok := <-ch:
			require.True(t, ok, "the observation ended while waiting for %s", what)
			if cond(ld) {
				return ld, time.Now()
			}
		case <-deadline:
			t.Fatalf("no %s observed within %v", what, limit)
		}
	}
}

// leadUntil runs LeadAs(value) on m until stop is closed (fn returns nil then) and returns
// Lead's result on the returned channel.
func leadUntil(ctx context.Context, m *advisory.Manager, name, value string, stop <-chan struct{}) <-chan error {
	done := make(chan error, 1)
	go func() {
		done <- m.LeadAs(ctx, name, value, func(ctx context.Context) error {
			select {
			case <-stop:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	return done
}

// leaderManager is a Manager with the leader table, created.
func leaderManager(t *testing.T, app string, opts ...advisory.Option) *advisory.Manager {
	t.Helper()
	m := newManager(t, []string{"application_name=" + app}, append([]advisory.Option{advisory.WithLeaderTable()}, opts...)...)
	require.NoError(t, m.CreateLeaderTable(ctxT(t)))
	return m
}

// TestObserveFollowsLeadersByNotification (issue 23, item 3): an observer whose re-check
// is an hour away sees each leader, with its published value, as it comes: when the first
// leader is elected, when it steps down and the candidate takes over, and when the
// candidate's session is terminated and it is elected again on a new session. Only the
// notifications can have told it.
func TestObserveFollowsLeadersByNotification(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	obs := leaderManager(t, "observer", advisory.WithLeaderRecheck(time.Hour))
	ch, err := obs.Observe(ctx, name)
	require.NoError(t, err)
	first, _ := awaitLeader(t, ch, 10*time.Second, "the first reading", func(advisory.Leader) bool { return true })
	require.NoError(t, first.Err)
	assert.False(t, first.Elected, "nobody leads yet: %+v", first)
	assert.Equal(t, name, first.Name)

	a, b := leaderManager(t, "cand-a"), leaderManager(t, "cand-b")
	stopA, stopB := make(chan struct{}), make(chan struct{})
	doneA := leadUntil(ctx, a, name, "10.0.0.1:8080", stopA)
	la, _ := awaitLeader(t, ch, 10*time.Second, "leader a", func(l advisory.Leader) bool { return l.Value == "10.0.0.1:8080" })
	assert.True(t, la.Elected)
	assert.Equal(t, "cand-a", la.Holder.ApplicationName)
	assert.Equal(t, name, la.Holder.Name, "Holders still reads the lock's name after Publish")
	requireHeldBy(t, advisory.KeyOf(name), la.Holder.PID)
	assert.False(t, la.Published.IsZero())

	doneB := leadUntil(ctx, b, name, "10.0.0.2:8080", stopB)
	waitForWaiters(t, advisory.KeyOf(name), 1)
	close(stopA) // a steps down: its Unlock is announced, then b's election
	require.NoError(t, <-doneA)
	lb, _ := awaitLeader(t, ch, 10*time.Second, "leader b", func(l advisory.Leader) bool { return l.Value == "10.0.0.2:8080" })
	assert.Equal(t, "cand-b", lb.Holder.ApplicationName)
	requireHeldBy(t, advisory.KeyOf(name), lb.Holder.PID)

	killed := time.Now()
	terminate(t, lb.Holder.PID) // b is told, campaigns again, and wins on a new session
	lb2, seen := awaitLeader(t, ch, 10*time.Second, "b on a new session", func(l advisory.Leader) bool {
		return l.Elected && l.Holder.PID != lb.Holder.PID && l.Value == "10.0.0.2:8080"
	})
	requireHeldBy(t, advisory.KeyOf(name), lb2.Holder.PID)
	t.Logf("terminated leader re-elected on a new session and observed after %v", seen.Sub(killed))
	close(stopB)
	require.NoError(t, <-doneB)
	none, _ := awaitLeader(t, ch, 10*time.Second, "no leader", func(l advisory.Leader) bool { return !l.Elected })
	assert.Zero(t, none.Holder.PID)
	assert.Empty(t, none.Value)
}

// TestObserveRechecksWhatNobodyAnnounces: a plain Lock announces nothing, and a leader
// terminated with no successor cannot: the re-check finds both. A value published by an
// earlier holding is never shown for a later holder, whose session is another.
func TestObserveRechecksWhatNobodyAnnounces(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	const recheck = 200 * time.Millisecond
	obs := leaderManager(t, "observer", advisory.WithLeaderRecheck(recheck))
	m := leaderManager(t, "holder")
	ch, err := obs.Observe(ctx, name)
	require.NoError(t, err)
	awaitLeader(t, ch, 10*time.Second, "nobody", func(l advisory.Leader) bool { return !l.Elected })

	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	locked := time.Now()
	ld, seen := awaitLeader(t, ch, 10*time.Second, "the plain holder", func(l advisory.Leader) bool { return l.Elected })
	assert.Equal(t, l.PID(), ld.Holder.PID)
	assert.Empty(t, ld.Value)
	t.Logf("unannounced holder seen after %v (re-check %v)", seen.Sub(locked), recheck)

	require.NoError(t, l.Publish(ctx, "old"))
	awaitLeader(t, ch, 10*time.Second, "the published value", func(l advisory.Leader) bool { return l.Value == "old" })
	killed := time.Now()
	terminate(t, l.PID())
	_, seen = awaitLeader(t, ch, 10*time.Second, "no leader", func(l advisory.Leader) bool { return !l.Elected })
	t.Logf("terminated leader without a successor seen gone after %v (re-check %v)", seen.Sub(killed), recheck)
	<-l.Done()

	l2, err := m.Lock(ctx, name) // a new session; the old row names the old one
	require.NoError(t, err)
	defer l2.Unlock(ctx)
	ld, _ = awaitLeader(t, ch, 10*time.Second, "the next holder", func(l advisory.Leader) bool { return l.Elected })
	assert.Equal(t, l2.PID(), ld.Holder.PID)
	assert.Empty(t, ld.Value, "the earlier holding's value is not this holder's")
	got, err := obs.Leader(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, l2.PID(), got.Holder.PID)
	assert.Empty(t, got.Value)
}

// TestPublishRefusesWhatItCannotDo: a shared lock does not lead; a value needs a leader
// table that exists; an ended lock publishes nothing. The lock is kept after each refusal,
// and nothing is left pinned.
func TestPublishRefusesWhatItCannotDo(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	plain := newManager(t, nil)
	sh, err := plain.LockShared(ctx, name)
	require.NoError(t, err)
	assert.ErrorIs(t, sh.Publish(ctx, ""), advisory.ErrInvalidOption)
	require.NoError(t, sh.Unlock(ctx))

	l, err := plain.Lock(ctx, name)
	require.NoError(t, err)
	assert.ErrorIs(t, l.Publish(ctx, "v"), advisory.ErrNoLeaderTable, "no WithLeaderTable")
	require.NoError(t, l.Publish(ctx, ""), "announcing needs no table")
	requireHeldBy(t, advisory.KeyOf(name), l.PID())
	require.NoError(t, l.Unlock(ctx))
	assert.ErrorIs(t, l.Publish(ctx, ""), advisory.ErrNotHeld)
	err = plain.LeadAs(ctx, name, "v", func(context.Context) error { t.Error("fn ran"); return nil })
	assert.ErrorIs(t, err, advisory.ErrNoLeaderTable)

	missing := newManager(t, nil, advisory.WithLeaderTable("no_such_leader_table"))
	l, err = missing.Lock(ctx, name)
	require.NoError(t, err)
	assert.ErrorIs(t, l.Publish(ctx, "v"), advisory.ErrNoLeaderTable)
	requireHeldBy(t, advisory.KeyOf(name), l.PID())
	_, err = missing.Leader(ctx, name)
	assert.ErrorIs(t, err, advisory.ErrNoLeaderTable, "a follower is told the table is missing")
	require.NoError(t, l.Unlock(ctx))
	requireFree(t, advisory.KeyOf(name))
	requireNoAcquired(t, plain)
	requireNoAcquired(t, missing)
}

// TestObserveEndsWithItsContextOrTheManager: the channel is closed when ctx ends or the
// Manager closes, and the shared LISTEN connection goes back to the pool when the last
// observer ends.
func TestObserveEndsWithItsContextOrTheManager(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx, cancel := context.WithCancel(ctxT(t))
	ch1, err := m.Observe(ctx, t.Name()+"1")
	require.NoError(t, err)
	ch2, err := m.Observe(ctxT(t), t.Name()+"2")
	require.NoError(t, err)
	awaitLeader(t, ch1, 10*time.Second, "a reading", func(advisory.Leader) bool { return true })
	awaitLeader(t, ch2, 10*time.Second, "a reading", func(advisory.Leader) bool { return true })
	cancel()
	requireClosed(t, ch1)
	m.Close()
	requireClosed(t, ch2)
	_, err = m.Observe(ctxT(t), t.Name())
	assert.ErrorIs(t, err, advisory.ErrClosed)
	_, err = m.Observe(ctxT(t), "")
	assert.ErrorIs(t, err, advisory.ErrInvalidKey)

	m2 := newManager(t, nil)
	ctx, cancel = context.WithCancel(ctxT(t))
	ch, err := m2.Observe(ctx, t.Name())
	require.NoError(t, err)
	awaitLeader(t, ch, 10*time.Second, "a reading", func(advisory.Leader) bool { return true })
	cancel()
	requireClosed(t, ch)
	requireNoAcquired(t, m2)
}

func requireClosed(t *testing.T, ch <-chan advisory.Leader) {
	t.Helper()
	deadline := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("the observation's channel was not closed")
		}
	}
}

// leaderWorkerEnv makes TestLeaderWorkerProcess a leader: "NAME VALUE".
const leaderWorkerEnv = "ADVISORY_LEADER_WORKER"

// TestObserveSeesTheSuccessorOfAKilledLeader: the leader is another process, SIGKILLed;
// the candidate here takes over as soon as the server has freed the lock, and the
// observer, whose re-check is an hour away, sees the candidate as soon as it announces.
func TestObserveSeesTheSuccessorOfAKilledLeader(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	obs := leaderManager(t, "observer", advisory.WithLeaderRecheck(time.Hour))
	ch, err := obs.Observe(ctx, name)
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaderWorkerProcess$")
	cmd.Env = append(os.Environ(), leaderWorkerEnv+"="+name+" worker")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "the worker leads")
	require.Equal(t, "LEADING", lines.Text())
	lw, _ := awaitLeader(t, ch, 10*time.Second, "the worker", func(l advisory.Leader) bool { return l.Value == "worker" })

	cand := leaderManager(t, "candidate")
	stop := make(chan struct{})
	defer close(stop)
	elected := make(chan time.Time, 1)
	go cand.LeadAs(ctx, name, "candidate", func(ctx context.Context) error {
		elected <- time.Now()
		<-stop
		return nil
	})
	waitForWaiters(t, advisory.KeyOf(name), 1)
	killed := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	lc, seen := awaitLeader(t, ch, 10*time.Second, "the candidate", func(l advisory.Leader) bool { return l.Value == "candidate" })
	assert.NotEqual(t, lw.Holder.PID, lc.Holder.PID)
	requireHeldBy(t, advisory.KeyOf(name), lc.Holder.PID)
	won := <-elected
	t.Logf("leader SIGKILLed: candidate elected after %v, observed after %v (%v after its election)",
		won.Sub(killed), seen.Sub(killed), seen.Sub(won))
}

// TestLeaderWorkerProcess is not a test: it is the leader of
// TestObserveSeesTheSuccessorOfAKilledLeader (run with leaderWorkerEnv set). It leads
// NAME with VALUE, prints LEADING and waits to be killed.
func TestLeaderWorkerProcess(t *testing.T) {
	spec := os.Getenv(leaderWorkerEnv)
	if spec == "" {
		t.Skip("a helper process of TestObserveSeesTheSuccessorOfAKilledLeader")
	}
	var name, value string
	_, err := fmt.Sscan(spec, &name, &value)
	require.NoError(t, err)
	m := leaderManager(t, "worker")
	m.LeadAs(ctxT(t), name, value, func(ctx context.Context) error {
		os.Stdout.WriteString("LEADING\n")
		<-ctx.Done()
		return nil
	})
}

// TestPublishWhenCtxEndsAtAnyCheck: whichever check of ctx the cancellation lands on,
// Publish returns nil or ctx's error with the lock still held and usable, and LeadAs
// returns with the lock released; nothing stays pinned. (Observe's end with its ctx:
// TestObserveEndsWithItsContextOrTheManager.)
func TestPublishWhenCtxEndsAtAnyCheck(t *testing.T) {
	t.Parallel()
	m := leaderManager(t, "cancel")
	name := t.Name()
	for n := 1; n <= 20; n++ {
		l, err := m.Lock(ctxT(t), name)
		require.NoError(t, err)
		parent, cancel := context.WithTimeout(ctxT(t), 10*time.Second)
		err = l.Publish(checkctx.CancelAt(parent, n), "v")
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.Canceled, "Publish, ctx cancelled at its check #%d", n)
		}
		requireHeldBy(t, l.Key(), l.PID())
		require.NoError(t, l.Publish(ctxT(t), "again"), "the lock is usable after #%d", n)
		require.NoError(t, l.Unlock(ctxT(t)))

		parent, cancel = context.WithTimeout(ctxT(t), 10*time.Second)
		err = m.LeadAs(checkctx.CancelAt(parent, n), name, "v", func(context.Context) error { return nil })
		cancel()
		if err != nil {
			require.ErrorIs(t, err, context.Canceled, "LeadAs, ctx cancelled at its check #%d", n)
		}
		requireReleased(t, m, name, "LeadAs returned (%v), ctx cancelled at its check #%d", err, n)
	}
	requireNoAcquired(t, m)
}

// TestObserveConvergesRandomized drives three candidates (LeadAs, each with its own value)
// through seeded random changes (a leader steps down, its session is terminated with or
// without a candidate waiting, a candidate joins) while an observer whose re-check is an
// hour away follows (ADVISORY_OBSERVE_SEED replays a seed). After each change, the observer's latest value must come to name
// the session pg_locks shows holding the lock, with that candidate's value: every change
// reaches it through a notification, none is lost or left stale.
func TestObserveConvergesRandomized(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("ADVISORY_OBSERVE_SEED"), 10, 64); err == nil {
		seed = v
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d (replay: ADVISORY_OBSERVE_SEED=%d)", seed, seed)
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	obs := leaderManager(t, "observer", advisory.WithLeaderRecheck(time.Hour))
	ch, err := obs.Observe(ctx, name)
	require.NoError(t, err)
	var latest atomic.Pointer[advisory.Leader]
	go func() {
		for ld := range ch {
			latest.Store(&ld)
		}
	}()

	type cand struct {
		m    *advisory.Manager
		stop chan struct{}
		done <-chan error
	}
	cands := make([]*cand, 3)
	join := func(i int) {
		c := cands[i]
		c.stop = make(chan struct{})
		c.done = leadUntil(ctx, c.m, name, fmt.Sprintf("cand-%d", i), c.stop)
	}
	for i := range cands {
		cands[i] = &cand{m: leaderManager(t, fmt.Sprintf("cand-%d", i))}
		join(i)
	}
	running := func(i int) bool { return cands[i].stop != nil }
	for step := range 12 {
		// The truth: who holds the lock, and who that is.
		var holder uint32
		eventually(t, 10*time.Second, func() bool {
			for _, r := range lockRows(t, key) {
				if r.Granted {
					holder = r.PID
					return true
				}
			}
			return false
		}, "step %d: somebody leads", step)
		leaderOf := -1
		for i := range cands {
			if !running(i) {
				continue
			}
			ld, err := cands[i].m.Leader(ctx, name)
			require.NoError(t, err)
			if ld.Holder.PID == holder && ld.Holder.ApplicationName == fmt.Sprintf("cand-%d", i) {
				leaderOf = i
			}
		}
		require.GreaterOrEqual(t, leaderOf, 0, "step %d: the holder %d is a candidate", step, holder)
		want := fmt.Sprintf("cand-%d", leaderOf)
		eventually(t, 10*time.Second, func() bool {
			ld := latest.Load()
			return ld != nil && ld.Elected && ld.Holder.PID == holder && ld.Value == want
		}, "step %d (seed %d): the observer names %s (pid %d); it says %+v", step, seed, want, holder, latest.Load())

		switch action := rng.IntN(3); {
		case action == 0: // the leader steps down; it joins again later
			close(cands[leaderOf].stop)
			require.NoError(t, <-cands[leaderOf].done)
			cands[leaderOf].stop = nil
		case action == 1: // its session is terminated: it campaigns again
			terminate(t, holder)
			eventually(t, 10*time.Second, func() bool {
				for _, r := range lockRows(t, key) {
					if r.PID == holder {
						return false
					}
				}
				return true
			}, "step %d: the terminated session is gone", step)
		default: // somebody who stepped down joins again
			for i := range cands {
				if !running(i) {
					join(i)
					break
				}
			}
		}
		if !running(0) && !running(1) && !running(2) {
			join(rng.IntN(3))
		}
	}
	for i := range cands { // stop all first: a waiting candidate returns once it leads
		if running(i) {
			close(cands[i].stop)
		}
	}
	for i := range cands {
		if running(i) {
			require.NoError(t, <-cands[i].done)
		}
	}
	requireFree(t, key)
}
