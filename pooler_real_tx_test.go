package advisory_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// Issue 36 against the real thing: Debian's PgBouncer in transaction mode, with a pool of
// pgtest.PgBouncerPoolSize (3) server connections shared by the library's clients and,
// in the busy runs, by background clients. The Manager detects the pooler and holds each
// lock as one open transaction; every guarantee is checked through it, watching the
// server directly.

// TestPgBouncerTransactionHoldings runs the checks quiet and busy (in parallel with each
// other, not with the package's other tests).
func TestPgBouncerTransactionHoldings(t *testing.T) {
	for _, load := range poolerLoads {
		t.Run(load.name, func(t *testing.T) {
			t.Parallel()
			pgtest.Need(t, srv, startErr)
			b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithConnectQuery(connectQuery(serverConnDefaults)))
			busyClients(t, b.DSN(), load.busy)
			t.Run("detected and reported", func(t *testing.T) { txPoolerDetected(t, b) })
			t.Run("detected every time", func(t *testing.T) { txPoolerDetectedEveryTime(t, b, 40) })
			if load.busy == 0 {
				// Quiet, PgBouncer hands a new client the server connection last used: the
				// self-test's second connection meets the first's backend every time.
				t.Run("a probe that saw nothing", func(t *testing.T) { txPoolerProbeMissed(t, b) })
			}
			t.Run("locks work", func(t *testing.T) { txPoolerLocksWork(t, b) })
			for _, c := range clientModes(b) {
				t.Run("never two holders/"+c.name, func(t *testing.T) { poolerNeverTwoHolders(t, c.dsn) })
			}
			t.Run("never two in the critical section", func(t *testing.T) { txPoolerExclusion(t, b) })
			t.Run("a cancel racing the grant leaves nothing", func(t *testing.T) {
				cancelRacingTheGrant(t, pooledManager(t, b), pooledManager(t, b), 60)
			})
			t.Run("termination told", func(t *testing.T) { txPoolerTermination(t, b) })
			t.Run("fenced writes and tokens", func(t *testing.T) { txPoolerFencing(t, b) })
			t.Run("work tagged and drained", func(t *testing.T) { txPoolerDrain(t, b) })
			t.Run("leaders observed by re-check", func(t *testing.T) { txPoolerLeaders(t, b) })
			t.Run("sessions and semaphores", func(t *testing.T) { txPoolerSessionAndSemaphore(t, b) })
			t.Run("no lock left on a server connection", func(t *testing.T) { requireNoLockLeft(t, b) })
			t.Run("no session setting leaks", func(t *testing.T) { requireNoSettingLeaked(t, b, serverConnDefaults) })
		})
	}
}

// pooledManager is a Manager through b, closed when the test ends; it must hold by
// transaction.
func pooledManager(t testing.TB, b *pgtest.PgBouncer, opts ...advisory.Option) *advisory.Manager {
	t.Helper()
	m, err := advisory.New(ctxT(t), b.DSN(), opts...)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.Equal(t, advisory.HoldingTransaction, m.Holding())
	return m
}

// txPoolerDetected: New finds the pooler, holds by transaction, says so once at Info,
// and beats by default.
func txPoolerDetected(t *testing.T, b *pgtest.PgBouncer) {
	var mu sync.Mutex
	var said []slog.Record
	logger := slog.New(handlerFunc(func(r slog.Record) {
		if strings.Contains(r.Message, "transaction pooler") {
			mu.Lock()
			said = append(said, r)
			mu.Unlock()
		}
	}))
	m := pooledManager(t, b, advisory.WithLogger(logger))
	require.True(t, m.Bounds().Proxied)
	require.True(t, m.Bounds().TransactionPooler)
	l, err := m.Lock(ctxT(t), t.Name())
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctxT(t)))
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, said, 1, "said once")
	assert.Equal(t, slog.LevelInfo, said[0].Level)
	assert.Contains(t, said[0].Message, "held as one open transaction")
	said[0].Attrs(func(a slog.Attr) bool {
		if a.Key == "heartbeat" {
			assert.Equal(t, 2*time.Second, a.Value.Duration(), "the default heartbeat behind a transaction pooler")
		}
		return true
	})
}

// txPoolerDetectedEveryTime: n Managers in a row find the pooler and hold by transaction;
// none fails. Busy clients once hid the pooler from New's probe about one time in 300,
// and the token its set-up then left on a shared server connection made the next New
// through it fail too.
func txPoolerDetectedEveryTime(t *testing.T, b *pgtest.PgBouncer, n int) {
	for i := range n {
		m, err := advisory.New(ctxT(t), b.DSN())
		require.NoError(t, err, "New %d", i)
		kind := m.Holding()
		m.Close()
		require.Equal(t, advisory.HoldingTransaction, kind, "New %d", i)
	}
}

// txPoolerProbeMissed: a probe that found nothing (as busy clients could make it) leaves
// New's self-test to meet the pooler. A Manager that may hold by transaction does, and
// one asked for session holdings fails with ErrPooler saying what to do; either way the
// set-up's token and the self-test's key are taken back from the server connection.
func txPoolerProbeMissed(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	m, err := advisory.New(ctx, b.DSN(), advisory.WithBlindProbeForTest())
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, advisory.HoldingTransaction, m.Holding())
	require.True(t, m.Bounds().TransactionPooler)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	requireHeldBy(t, advisory.KeyOf(t.Name()), l.PID())
	require.NoError(t, l.Unlock(ctx))

	s, err := advisory.New(ctx, b.DSN(), advisory.WithBlindProbeForTest(), advisory.WithHolding(advisory.HoldingSession))
	if s != nil {
		s.Close()
	}
	require.ErrorIs(t, err, advisory.ErrPooler)
	assert.Contains(t, err.Error(), "second connection was given the first's backend")
	assert.Contains(t, err.Error(), "WithHolding(HoldingTransaction)")
	m.Close()
	requireNoLockLeft(t, b)
	requireNoSettingLeaked(t, b, serverConnDefaults)
}

// txPoolerLocksWork: holders and waiters as on a direct connection, through the pooler's
// shared server connections.
func txPoolerLocksWork(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	name, key := t.Name(), advisory.KeyOf(t.Name())
	a, c := pooledManager(t, b), pooledManager(t, b)
	la, err := a.Lock(ctx, name)
	require.NoError(t, err)
	requireHeldBy(t, key, la.PID())
	require.Equal(t, "idle in transaction", backendState(t, la.PID()))
	_, err = c.TryLock(ctx, name)
	require.ErrorIs(t, err, advisory.ErrLocked)
	got := make(chan *advisory.Lock, 1)
	go func() { lc, err := c.Lock(ctx, name); assert.NoError(t, err); got <- lc }()
	waitForWaiters(t, key, 1)
	hs, err := c.Holders(ctx, name)
	require.NoError(t, err)
	require.Len(t, hs, 2)
	assert.Equal(t, name, hs[0].Name)
	require.NoError(t, la.Unlock(ctx))
	lc := <-got
	requireHeldBy(t, key, lc.PID())
	require.NoError(t, lc.Unlock(ctx))
	requireFree(t, key)
	requireNoAcquired(t, a)
	requireNoAcquired(t, c)
}

// txPoolerExclusion: goroutines of two Managers take one lock in turn through the pooler;
// in the critical section each checks that it is alone and that its backend holds the
// lock in pg_locks.
func txPoolerExclusion(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	name, key := t.Name(), advisory.KeyOf(t.Name())
	ms := []*advisory.Manager{pooledManager(t, b), pooledManager(t, b)}
	var inside, most, rounds atomic.Int64
	var wg sync.WaitGroup
	for g := 0; g < 4; g++ {
		wg.Go(func() {
			for i := 0; i < 15; i++ {
				l, err := ms[g%2].Lock(ctx, name)
				if !assert.NoError(t, err) {
					return
				}
				n := inside.Add(1)
				most.Store(max(most.Load(), n))
				assert.Equal(t, []uint32{l.PID()}, grantedPIDs(t, key))
				rounds.Add(1)
				inside.Add(-1)
				assert.NoError(t, l.Unlock(ctx))
			}
		})
	}
	wg.Wait()
	require.Equal(t, int64(60), rounds.Load())
	require.Equal(t, int64(1), most.Load(), "two holders in the critical section at once")
}

// txPoolerTermination: a terminated holding is told at once, through the pooler.
func txPoolerTermination(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	m := pooledManager(t, b)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	time.Sleep(5 * time.Millisecond)
	start := time.Now()
	terminate(t, l.PID())
	select {
	case <-l.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("not told within 2s")
	}
	t.Logf("told %v after pg_terminate_backend", time.Since(start))
	require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	eventually(t, 5*time.Second, func() bool { return len(lockRows(t, l.Key())) == 0 }, "the key freed")
	l2, err := m.TryLock(ctx, t.Name())
	require.NoError(t, err, "the Manager goes on")
	require.NoError(t, l2.Unlock(ctx))
}

// txPoolerFencing: BeginFunc's writes commit with the holding, DoTx commits with its
// lock, and tokens increase across holders, through the pooler.
func txPoolerFencing(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	table := createRowsTable(t)
	fence := "fence_tokens_" + advisory.KeyOf(t.Name()).String()
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{fence}.Sanitize()) })
	m := pooledManager(t, b, advisory.WithFenceTable(fence))
	require.NoError(t, m.CreateFenceTable(ctx))
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	tok, err := l.Token(ctx)
	require.NoError(t, err)
	require.NoError(t, l.BeginFunc(ctx, insertRow(ctx, table, "held")))
	assert.Empty(t, rowsOf(t, table))
	require.NoError(t, l.Unlock(ctx))
	assert.Equal(t, []string{"held"}, rowsOf(t, table))
	require.NoError(t, m.Do(ctx, t.Name(), func(ctx context.Context) error {
		l := advisory.LockFromContext(ctx)
		tok2, err := l.Token(ctx)
		if err != nil || tok2 <= tok {
			return fmt.Errorf("token %d after %d: %w", tok2, tok, err)
		}
		return l.BeginFunc(ctx, func(tx pgx.Tx) error {
			if err := m.CheckToken(ctx, tx, t.Name(), tok2); err != nil {
				return err
			}
			return insertRow(ctx, table, "do")(tx)
		})
	}))
	require.NoError(t, m.DoTx(ctx, t.Name(), func(ctx context.Context, tx pgx.Tx) error {
		return insertRow(ctx, table, "dotx")(tx)
	}))
	assert.Equal(t, []string{"do", "dotx", "held"}, rowsOf(t, table))
	requireNoAcquired(t, m)
}

// txPoolerDrain: a later holding's Do drains the work an earlier holder tagged, through
// the pooler too.
func txPoolerDrain(t *testing.T, b *pgtest.PgBouncer) {
	name := t.Name()
	first, second := pooledManager(t, b), pooledManager(t, b, advisory.WithDrainWait(0))
	l1, err := first.Lock(ctxT(t), name)
	require.NoError(t, err)
	workPID, _ := slowWork(t, workConn(t, l1, ""), name)
	require.NoError(t, l1.Unlock(ctxT(t)))
	ran := false
	require.NoError(t, second.Do(ctxT(t), name, func(ctx context.Context) error { ran = true; return nil }))
	require.True(t, ran)
	require.True(t, backendGone(t, workPID), "the earlier holder's work was drained")
	require.False(t, markerCommitted(t, name))
}

// txPoolerLeaders: no LISTEN behind the pooler: an observer sees the leader, its value
// and its step-down by re-checking.
func txPoolerLeaders(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	leader := pooledManager(t, b, advisory.WithLeaderTable())
	follower := pooledManager(t, b, advisory.WithLeaderTable(), advisory.WithLeaderRecheck(200*time.Millisecond))
	require.NoError(t, leader.CreateLeaderTable(ctx))
	name := t.Name()
	ch, err := follower.Observe(ctx, name)
	require.NoError(t, err)
	awaitLeader(t, ch, 10*time.Second, "nobody", func(l advisory.Leader) bool { return !l.Elected })
	stop := make(chan struct{})
	done := leadUntil(ctx, leader, name, "tx-pooled", stop)
	ld, _ := awaitLeader(t, ch, 10*time.Second, "the leader", func(l advisory.Leader) bool { return l.Value == "tx-pooled" })
	requireHeldBy(t, advisory.KeyOf(name), ld.Holder.PID)
	close(stop)
	require.NoError(t, <-done)
	awaitLeader(t, ch, 10*time.Second, "the step-down", func(l advisory.Leader) bool { return !l.Elected })
}

// txPoolerSessionAndSemaphore: a Session's locks on one transaction, and a Semaphore's
// slots handed over without LISTEN, through the pooler.
func txPoolerSessionAndSemaphore(t *testing.T, b *pgtest.PgBouncer) {
	ctx := ctxT(t)
	m := pooledManager(t, b)
	S, err := m.Session(ctx)
	require.NoError(t, err)
	names := []string{t.Name() + "/a", t.Name() + "/b"}
	require.NoError(t, S.LockAll(ctx, names))
	requireHeldBy(t, advisory.KeyOf(names[1]), S.PID())
	require.ErrorIs(t, S.Unlock(ctx, names[0]), advisory.ErrTransactionHolding)
	require.NoError(t, S.Close(ctx))
	requireFree(t, advisory.KeyOf(names[0]))

	sem, err := m.Semaphore(t.Name(), 1)
	require.NoError(t, err)
	first, err := sem.Acquire(ctx)
	require.NoError(t, err)
	got := make(chan *advisory.Lock, 1)
	go func() { l, err := sem.Acquire(ctx); assert.NoError(t, err); got <- l }()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	require.NoError(t, first.Unlock(ctx))
	second := <-got
	assert.Less(t, time.Since(start), advisory.SemaphoreRecheck+time.Second, "handed over within the re-check")
	require.NoError(t, second.Unlock(ctx))
	requireNoAcquired(t, m)
}
