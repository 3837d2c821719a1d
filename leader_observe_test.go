package advisory_test

import (
	"context"
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
