package advisory_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/advisorytest"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestServerFunctionsCannotBeShadowed: a role whose search_path puts a schema ahead of
// pg_catalog in which every server function, aggregate, operator, relation and type name
// the library's sources use has a shadow that fails when used. Every library call still
// works, and its locks are real (pg_locks, refused to another session): each server name
// in its SQL is qualified, so none reaches the shadows. The same calls written
// unqualified do reach them (checked first, so the test cannot pass by shadowing nothing).
func TestServerFunctionsCannotBeShadowed(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	db := advisorytest.DSN(t)
	owner, err := pgx.Connect(ctx, db)
	require.NoError(t, err)
	t.Cleanup(func() { owner.Close(context.Background()) })
	_, err = owner.Exec(ctx, shadowSQL)
	require.NoError(t, err)
	var made int
	require.NoError(t, owner.QueryRow(ctx, "SELECT shadow.make($1, $2)", sourceWords(t), shadowOperators).Scan(&made))
	t.Logf("%d shadows made", made)

	shadowed := pgtest.WithPairs(db, "search_path=shadow,pg_catalog,public")
	victim, err := pgx.Connect(ctx, shadowed)
	require.NoError(t, err)
	t.Cleanup(func() { victim.Close(context.Background()) })
	for _, sql := range []string{
		"SELECT pg_try_advisory_lock(1)", "SELECT pg_advisory_unlock_all()", "SELECT pg_backend_pid()",
		"SELECT count(pg_backend_pid())", "SELECT 1 = 1", "SELECT 'a'::text", "SELECT FROM pg_locks",
		"SELECT current_setting('advisory.owner', true)", "SELECT 1::bigint >> 3",
	} {
		_, err := victim.Exec(ctx, sql)
		require.Error(t, err, "%s reaches no shadow: the test would prove nothing", sql)
	}

	m, err := advisory.New(ctx, shadowed, advisory.WithDrainWait(10*time.Millisecond), advisory.WithLeaderTable())
	require.NoError(t, err, "New: setup, probe and the engine self-test")
	t.Cleanup(m.Close)
	other, err := advisory.New(ctx, shadowed, advisory.WithLeaderTable())
	require.NoError(t, err)
	t.Cleanup(other.Close)
	shadowWorkload(t, ctx, m, other, owner, shadowed)
	shadowLeaders(t, ctx, m, other)
}

// shadowLeaders runs the leader statements: the table's creation, Publish with and without
// a value (through LeadAs), the release's announcement, and the observer's reads.
func shadowLeaders(t *testing.T, ctx context.Context, m, other *advisory.Manager) {
	require.NoError(t, m.CreateLeaderTable(ctx))
	require.NoError(t, m.CreateLeaderTable(ctx))
	obs, err := other.Observe(ctx, "leader")
	require.NoError(t, err)
	seen := func(cond func(advisory.Leader) bool) advisory.Leader {
		for ld := range obs {
			require.NoError(t, ld.Err)
			if cond(ld) {
				return ld
			}
		}
		t.Fatal("the observation ended")
		return advisory.Leader{}
	}
	require.NoError(t, m.LeadAs(ctx, "leader", "v1", func(ctx context.Context) error {
		ld := seen(func(l advisory.Leader) bool { return l.Value == "v1" })
		if ld.Holder.PID != advisory.LockFromContext(ctx).PID() {
			return errors.New("the observer saw another leader")
		}
		return advisory.LockFromContext(ctx).Publish(ctx, "")
	}))
	seen(func(l advisory.Leader) bool { return !l.Elected })
	l, err := m.Lock(ctx, "leader")
	require.NoError(t, err)
	require.NoError(t, l.Publish(ctx, "v2"))
	ld, err := other.Leader(ctx, "leader")
	require.NoError(t, err)
	assert.Equal(t, "v2", ld.Value)
	require.NoError(t, l.Unlock(ctx))
}

// shadowWorkload runs every statement the library has through m (and other, a second
// process), and checks with owner (the default search_path) that the locks were real.
func shadowWorkload(t *testing.T, ctx context.Context, m, other *advisory.Manager, owner *pgx.Conn, shadowed string) {
	held := func(key advisory.Key, pair bool) []uint32 {
		sub := 1
		if pair {
			sub = 2
		}
		rows, err := owner.Query(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid = $1 AND objid = $2 AND objsubid = $3
			AND database = (SELECT oid FROM pg_database WHERE datname = current_database())`,
			uint32(uint64(key)>>32), uint32(key), sub)
		require.NoError(t, err)
		pids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
		require.NoError(t, err)
		return pids
	}

	l, err := m.Lock(ctx, "a")
	require.NoError(t, err)
	require.Equal(t, []uint32{l.PID()}, held(l.Key(), false))
	_, err = other.TryLock(ctx, "a")
	var locked *advisory.LockedError
	require.ErrorAs(t, err, &locked, "refused to another process")
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	_, err = other.Lock(short, "a") // cancelled wait: the reconcile statement
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	hs, err := other.Holders(ctx, "a")
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, l.PID(), hs[0].PID)
	_, err = m.AllHolders(ctx)
	require.NoError(t, err)

	require.NoError(t, m.CreateFenceTable(ctx))
	require.NoError(t, m.CreateFenceTable(ctx)) // the second finds the table current
	tok, err := l.Token(ctx)
	require.NoError(t, err)
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
		if err := m.CheckToken(ctx, tx, "a", tok); err != nil {
			return err
		}
		return advisory.XactLock(ctx, tx, "x")
	}))
	work := l.WorkAppName("shadow")
	cfg, err := pgx.ParseConfig(shadowed)
	require.NoError(t, err)
	l.WorkConfig(&cfg.Config)
	tagged, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { tagged.Close(context.Background()) })
	require.NoError(t, l.Unlock(ctx))
	require.Empty(t, held(l.Key(), false))

	// The next holder drains the earlier holder's leftover work (list and terminate).
	require.NoError(t, other.Do(ctx, "a", func(ctx context.Context) error { return nil }))
	require.Eventually(t, func() bool { return tagged.Ping(ctx) != nil }, 10*time.Second, 10*time.Millisecond,
		"the leftover session %s was terminated", work)
	require.NoError(t, other.DoTx(ctx, "a", func(ctx context.Context, tx pgx.Tx) error {
		return advisory.TryXactLockShared(ctx, tx, "x")
	}))

	for _, take := range []func() (*advisory.Lock, error){
		func() (*advisory.Lock, error) { return m.LockShared(ctx, "b") },
		func() (*advisory.Lock, error) { return m.LockPair(ctx, advisory.Pair{7, 9}) },
		func() (*advisory.Lock, error) { return m.TryLockKey(ctx, 42) },
	} {
		l, err := take()
		require.NoError(t, err)
		p, pair := l.Pair()
		require.Equal(t, []uint32{l.PID()}, held(l.Key(), pair))
		if pair {
			tok, err := l.Token(ctx)
			require.NoError(t, err)
			require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error { return m.CheckTokenPair(ctx, tx, p, tok) }))
		}
		require.NoError(t, l.Unlock(ctx))
	}

	s, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, s.LockAll(ctx, []string{"s1", "s2"}))
	require.NoError(t, other.Do(ctx, "s3", func(ctx context.Context) error {
		err := s.TryLockAll(ctx, []string{"s3", "s4"})
		if !errors.As(err, &locked) {
			return errors.New("TryLockAll of a held name did not fail with LockedError")
		}
		return nil
	}))
	require.Equal(t, []uint32{s.PID()}, held(advisory.KeyOf("s2"), false))
	require.NoError(t, s.Unlock(ctx, "s1"))
	require.NoError(t, s.Close(ctx))
	require.Empty(t, held(advisory.KeyOf("s2"), false))

	sem, err := m.Semaphore("sem", 1)
	require.NoError(t, err)
	slot, err := sem.Acquire(ctx)
	require.NoError(t, err)
	waiter, err := other.Semaphore("sem", 1)
	require.NoError(t, err)
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(ctx)
		if err == nil {
			err = l.Unlock(ctx)
		}
		got <- err
	}()
	time.Sleep(50 * time.Millisecond) // let the waiter listen: the release notifies it
	require.NoError(t, slot.Unlock(ctx))
	require.NoError(t, <-got)
}
