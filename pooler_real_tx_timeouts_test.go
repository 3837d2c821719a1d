package advisory_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// Transaction holdings against the timeouts production poolers and servers set, and a
// pooler with no server connection to spare.

// serverTimeouts are timeouts a server (or a role) may set, which would end a holding
// transaction or a wait: PgBouncer's connect_query gives them to every server
// connection, so only the holding's own SET LOCAL can keep them away. From PostgreSQL 17
// transaction_timeout too.
func serverTimeouts(t testing.TB) map[string]string {
	out := map[string]string{"statement_timeout": "1s", "lock_timeout": "1s", "idle_in_transaction_session_timeout": "1s"}
	var version int
	require.NoError(t, admin.QueryRow(context.Background(), "SELECT current_setting('server_version_num')::int").Scan(&version))
	if version >= 170000 {
		out["transaction_timeout"] = "1s"
	}
	return out
}

// TestPgBouncerTransactionHoldingOutlivesServerTimeouts: a Lock waits past the server's
// statement_timeout and lock_timeout, and a holding stays idle past its
// idle_in_transaction_session_timeout (and from PostgreSQL 17 transaction_timeout); the
// settings are the holding's for its length only.
func TestPgBouncerTransactionHoldingOutlivesServerTimeouts(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	timeouts := serverTimeouts(t)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithConnectQuery(connectQuery(timeouts)))
	ctx := ctxT(t)
	name, key := t.Name(), advisory.KeyOf(t.Name())
	holder, waiter := pooledManager(t, b), pooledManager(t, b)
	first, err := holder.Lock(ctx, name)
	require.NoError(t, err)
	got := make(chan *advisory.Lock, 1)
	go func() { l, err := waiter.Lock(ctx, name); assert.NoError(t, err); got <- l }()
	time.Sleep(1500 * time.Millisecond) // the waiter waits past statement_timeout and lock_timeout
	require.NoError(t, first.Err(), "idle in transaction past idle_in_transaction_session_timeout")
	require.NoError(t, first.Unlock(ctx))
	second := <-got
	require.NotNil(t, second)
	time.Sleep(1500 * time.Millisecond)
	require.NoError(t, second.Err())
	requireHeldBy(t, key, second.PID())
	require.NoError(t, second.Unlock(ctx))
	requireNoSettingLeaked(t, b, timeouts)
}

// TestPgBouncerIdleTransactionTimeout: PgBouncer's idle_transaction_timeout ends a
// holding that stays quiet past it, and the loss names the setting; a heartbeat below
// it keeps the holding.
func TestPgBouncerIdleTransactionTimeout(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithIdleTransactionTimeout(2))
	ctx := ctxT(t)
	beating := pooledManager(t, b, advisory.WithHeartbeat(300*time.Millisecond))
	var mu sync.Mutex
	var reasons []string
	quiet := pooledManager(t, b, advisory.WithHeartbeat(10*time.Second), advisory.WithHooks(advisory.Hooks{
		Ended: func(e advisory.LockEvent) { mu.Lock(); reasons = append(reasons, e.Reason); mu.Unlock() }}))
	kept, err := beating.Lock(ctx, t.Name()+"/kept")
	require.NoError(t, err)
	lost, err := quiet.Lock(ctx, t.Name()+"/lost")
	require.NoError(t, err)
	start := time.Now()
	select {
	case <-lost.Done():
		t.Logf("the quiet holding was ended %v after it began", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("idle_transaction_timeout 2s did not end a quiet holding within 10s")
	}
	require.ErrorIs(t, lost.Err(), advisory.ErrLockLost)
	assert.Contains(t, lost.Err().Error(), "idle_transaction_timeout")
	eventually(t, 5*time.Second, func() bool { return len(lockRows(t, lost.Key())) == 0 }, "the key freed")
	time.Sleep(time.Until(start.Add(5 * time.Second)))
	require.NoError(t, kept.Err(), "the heartbeat kept the holding past the pooler's timeout")
	requireHeldBy(t, kept.Key(), kept.PID())
	require.NoError(t, kept.Unlock(ctx))
	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{"timeout"}, reasons)
}

// TestPgBouncerNoServerConnectionToSpare: with every server connection of the pooler
// held, a Lock's statement waits in the pooler's queue, where a CancelRequest does not
// reach it (PgBouncer ignores one for a client without a server). A cancelled Lock then
// returns within the cancel grace, its connection closed: it holds nothing, and the
// Manager goes on once a server connection is free.
func TestPgBouncerNoServerConnectionToSpare(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(2))
	ctx := ctxT(t)
	const grace = 200 * time.Millisecond
	m := pooledManager(t, b, advisory.WithCancelGrace(grace)) // New leaves one pool connection idle
	other := pooledManager(t, b)
	var held []*advisory.Lock
	for _, n := range []string{"x", "y"} {
		l, err := other.Lock(ctx, t.Name()+"/"+n)
		require.NoError(t, err)
		held = append(held, l)
	}
	for _, try := range []func(context.Context, string) (*advisory.Lock, error){m.Lock, m.TryLock} {
		wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
		start := time.Now()
		_, err := try(wctx, t.Name())
		took := time.Since(start)
		cancel()
		require.Error(t, err)
		assert.True(t, errors.Is(err, context.DeadlineExceeded), "%v", err)
		assert.Less(t, took, 100*time.Millisecond+grace+500*time.Millisecond, "returned within the cancel grace")
		t.Logf("returned after %v: %v", took, err)
		requireFree(t, advisory.KeyOf(t.Name()))
	}
	for _, l := range held {
		require.NoError(t, l.Unlock(ctx))
	}
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.False(t, strings.Contains(b.Log(), "bad client state"), "PgBouncer survived the cancels")
}

// TestHeartbeatBehindATransactionPoolerIsValidated: behind a transaction pooler the
// heartbeat is the only way a holder hears of a cut between the pooler and the server,
// so New refuses one that is off, or too slow to tell the holder before the server can
// free the lock (by the minimum margin); the default beats every 2 s.
func TestHeartbeatBehindATransactionPoolerIsValidated(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction)
	for _, d := range []time.Duration{0, 11 * time.Second} {
		m, err := advisory.New(ctxT(t), b.DSN(), advisory.WithHeartbeat(d))
		if m != nil {
			m.Close()
		}
		require.ErrorIs(t, err, advisory.ErrInvalidOption, "heartbeat %v", d)
		t.Logf("heartbeat %v: %v", d, err)
	}
	pooledManager(t, b, advisory.WithHeartbeat(10*time.Second)) // 10 + 5 + 5 <= 20
	direct := newManager(t, nil, advisory.WithHeartbeat(0), advisory.WithHolding(advisory.HoldingTransaction))
	require.Equal(t, advisory.HoldingTransaction, direct.Holding(), "direct: no pooler between, nothing to beat for")
}
