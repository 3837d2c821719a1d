package advisory_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// More of transaction holdings on a direct connection: tokens, Sessions, the drain,
// in-process handoff, leaders and the heartbeat (see lease_tx_test.go).

// TestTransactionHoldingTokens: tokens increase across holders, session and transaction
// holdings alike; a token is durable once returned, though the holding's own transaction
// is then lost; a lost holding gets none.
func TestTransactionHoldingTokens(t *testing.T) {
	t.Parallel()
	ms := fenceManagersWith(t, 2, func(i int) []advisory.Option {
		if i == 0 {
			return []advisory.Option{advisory.WithHolding(advisory.HoldingTransaction)}
		}
		return nil
	})
	ctx := ctxT(t)
	name := t.Name()
	last := int64(0)
	for i := 0; i < 6; i++ {
		l, err := ms[i%2].Lock(ctx, name)
		require.NoError(t, err)
		tok, err := l.Token(ctx)
		require.NoError(t, err)
		require.Greater(t, tok, last, "holding %d (%v)", i, ms[i%2].Holding())
		again, err := l.Token(ctx)
		require.NoError(t, err)
		require.Equal(t, tok, again)
		if i == 2 { // lost after its token: the token stays taken
			time.Sleep(5 * time.Millisecond)
			terminate(t, l.PID())
			<-l.Done()
		}
		l.Unlock(ctx)
		last = tok
	}
	l, err := ms[0].Lock(ctx, name)
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	terminate(t, l.PID())
	<-l.Done()
	_, err = l.Token(ctx)
	require.ErrorIs(t, err, advisory.ErrLockLost, "a lost holding takes no token")
	requireNoAcquired(t, ms[0])
}

// TestTransactionHoldingSession: a Session's locks stand on one transaction: a Lock that
// fails or whose ctx ends keeps the Session's other locks (a savepoint), one lock
// cannot be released alone, and Close releases all.
func TestTransactionHoldingSession(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m, other := txManager(t), newManager(t, nil)
	n := func(s string) string { return t.Name() + "/" + s }
	S, err := m.Session(ctx)
	require.NoError(t, err)
	require.Equal(t, "idle in transaction", backendState(t, S.PID()))
	require.NoError(t, S.LockAll(ctx, []string{n("a"), n("b")}))
	requireHeldBy(t, advisory.KeyOf(n("a")), S.PID())
	blocker, err := other.Lock(ctx, n("c"))
	require.NoError(t, err)
	var locked *advisory.LockedError
	require.ErrorAs(t, S.TryLockAll(ctx, []string{n("c"), n("d")}), &locked)
	requireFree(t, advisory.KeyOf(n("d")))
	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	err = S.Lock(wctx, n("c"))
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	requireHeldBy(t, advisory.KeyOf(n("c")), blocker.PID())
	requireHeldBy(t, advisory.KeyOf(n("a")), S.PID())
	requireHeldBy(t, advisory.KeyOf(n("b")), S.PID())
	require.NoError(t, S.Err())
	require.NoError(t, S.Lock(ctx, n("a")), "reentrant")
	require.NoError(t, S.Unlock(ctx, n("a")), "counts down")
	err = S.Unlock(ctx, n("a"))
	require.ErrorIs(t, err, advisory.ErrTransactionHolding)
	requireHeldBy(t, advisory.KeyOf(n("a")), S.PID())
	require.Equal(t, 2, S.Held())
	require.NoError(t, blocker.Unlock(ctx))
	require.NoError(t, S.Lock(ctx, n("c")))
	require.NoError(t, S.Close(ctx))
	for _, k := range []string{"a", "b", "c"} {
		requireFree(t, advisory.KeyOf(n(k)))
	}
	requireNoAcquired(t, m)
}

// TestTransactionHoldingDrain: a drain that runs in a holding transaction sees earlier
// holders' sessions go (the server shows a transaction one snapshot of pg_stat_activity
// unless it is cleared), so it terminates the one left and returns at once.
func TestTransactionHoldingDrain(t *testing.T) {
	t.Parallel()
	name := t.Name()
	first, second := newManager(t, nil), txManager(t, advisory.WithDrainWait(200*time.Millisecond))
	l1, err := first.Lock(ctxT(t), name)
	require.NoError(t, err)
	endsAlone := workConn(t, l1, "")
	workPID, _ := slowWork(t, workConn(t, l1, ""), name)
	require.NoError(t, l1.Unlock(ctxT(t)))
	ran := false
	start := time.Now()
	time.AfterFunc(50*time.Millisecond, func() { endsAlone.Close(context.Background()) })
	require.NoError(t, second.Do(ctxT(t), name, func(ctx context.Context) error { ran = true; return nil }))
	require.True(t, ran)
	assert.Less(t, time.Since(start), 5*time.Second, "the drain saw the sessions go")
	require.True(t, backendGone(t, workPID))
}

// TestTransactionHoldingHandoff: with WithLocalHandoff a transaction holding passes to a
// queued Lock of its Manager on the same transaction; one with writes waiting for its
// COMMIT (BeginFunc) is released on the server instead, and its writes commit.
func TestTransactionHoldingHandoff(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	table := createRowsTable(t)
	var handoffs atomic.Int64
	m := txManager(t, advisory.WithLocalHandoff(8, time.Minute), advisory.WithHooks(advisory.Hooks{
		Acquired: func(e advisory.LockEvent) {
			if e.Handoff {
				handoffs.Add(1)
			}
		}}))
	for _, dirty := range []bool{false, true} {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		if dirty {
			require.NoError(t, l.BeginFunc(ctx, insertRow(ctx, table, "written")))
		}
		next := make(chan *advisory.Lock, 1)
		go func() { n, _ := m.Lock(ctx, t.Name()); next <- n }()
		queued(t, m, l.Key(), 1)
		before := handoffs.Load()
		require.NoError(t, l.Unlock(ctx))
		n := <-next
		require.NotNil(t, n)
		assert.Equal(t, !dirty, handoffs.Load() > before, "handed off (writes pending: %v)", dirty)
		requireHeldBy(t, n.Key(), n.PID())
		require.NoError(t, n.Unlock(ctx))
	}
	assert.Equal(t, []string{"written"}, rowsOf(t, table))
}

// TestTransactionHoldingLeads: a leader holding by transaction publishes its value
// (beside its transaction, so at once) and followers read it.
func TestTransactionHoldingLeads(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	leader := txManager(t, advisory.WithLeaderTable())
	require.NoError(t, leader.CreateLeaderTable(ctx))
	follower := newManager(t, nil, advisory.WithLeaderTable())
	name := t.Name()
	stop := make(chan struct{})
	done := leadUntil(ctx, leader, name, "tx-leader", stop)
	eventually(t, 10*time.Second, func() bool {
		ld, err := follower.Leader(ctx, name)
		require.NoError(t, err)
		return ld.Elected && ld.Value == "tx-leader"
	}, "the follower reads the transaction holding's value")
	close(stop)
	require.NoError(t, <-done)
}

// TestTransactionHoldingHeartbeat: beats run inside the holding's transaction and keep
// it: the lock stays held by the same backend, in the same transaction (its xact_start).
func TestTransactionHoldingHeartbeat(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := txManager(t, advisory.WithHeartbeat(100*time.Millisecond))
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	// The holding's transaction, as the server shows it; a beat may be running at any
	// look ("active"), so the state alone does not say the transaction is the same one.
	look := func() (q, state string, xactStart time.Time) {
		require.NoError(t, admin.QueryRow(ctx, "SELECT query, state, xact_start FROM pg_stat_activity WHERE pid = $1",
			int32(l.PID())).Scan(&q, &state, &xactStart))
		return q, state, xactStart
	}
	_, _, began := look()
	eventually(t, 5*time.Second, func() bool {
		q, _, _ := look()
		return !errors.Is(l.Err(), advisory.ErrLockLost) && strings.HasSuffix(q, "*/ SELECT pg_catalog.pg_backend_pid()")
	}, "a beat ran")
	requireHeldBy(t, l.Key(), l.PID())
	_, state, xactStart := look()
	require.Contains(t, []string{"idle in transaction", "active"}, state)
	require.True(t, began.Equal(xactStart), "the beats ran in the holding's transaction (began %v, now %v)", began, xactStart)
	var timeout string
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
		return tx.QueryRow(ctx, "SHOW lock_timeout").Scan(&timeout)
	}))
	assert.Equal(t, "0", timeout, "fn's statements have no lock_timeout (the wait's slices had one)")
	require.NoError(t, l.Unlock(ctx))
}

// insertRow returns a BeginFunc fn that writes v into table.
func insertRow(ctx context.Context, table, v string) func(pgx.Tx) error {
	return func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+table+" VALUES ($1)", v)
		return err
	}
}
