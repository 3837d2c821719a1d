package advisory_test

import (
	"context"
	"log/slog"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestAFullPoolerPoolIsNamedInTheWaitRecord (issue 43, item 10): behind PgBouncer in
// transaction mode with a pool of 2 server connections, two held locks take both (each
// is a transaction idle on its own); a third Lock, of one of those names, queues in the
// pooler for a server connection. Its wait record is a Warn that names the pooler's pool
// and the way out (default_pool_size, pool_max_conns), not the nested-Lock hint: the
// holder is another goroutine's holding.
func TestAFullPoolerPoolIsNamedInTheWaitRecord(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(2))
	rec := &recorder{}
	m := pooledManager(t, b, advisory.WithLogger(slog.New(rec)))
	ctx, name := ctxT(t), t.Name()
	// Three client connections in the Manager's pool, one more than the pooler has
	// server connections: the waiting Lock below then has one to queue on in the pooler
	// (a new one would wait there in its set-up, before any lock statement). The third is
	// opened while two holdings take both server connections, and set up once one ends.
	a, err := m.Lock(ctx, name+"/warm/a")
	require.NoError(t, err)
	b2, err := m.Lock(ctx, name+"/warm/b")
	require.NoError(t, err)
	third := make(chan *advisory.Lock, 1)
	go func() {
		l, err := m.Lock(ctx, name+"/warm/c")
		assert.NoError(t, err)
		third <- l
	}()
	eventually(t, 15*time.Second, func() bool { return clWaiting(t, b) > 0 }, "the third connection waits in the pooler")
	require.NoError(t, a.Unlock(ctx))
	c := <-third
	require.NotNil(t, c)
	require.NoError(t, b2.Unlock(ctx))
	require.NoError(t, c.Unlock(ctx))
	held := make(chan *advisory.Lock, 2)
	for _, n := range []string{name, name + "/other"} {
		go func() { // the holdings are other goroutines': no self-wait
			l, err := m.Lock(ctx, n)
			assert.NoError(t, err)
			held <- l
		}()
	}
	l1, l2 := <-held, <-held
	require.NotNil(t, l1)
	require.NotNil(t, l2)

	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waited := make(chan error, 1)
	go func() {
		l, err := m.Lock(wctx, name)
		if err == nil {
			err = l.Unlock(ctx)
		}
		waited <- err
	}()
	var got map[string]any
	eventually(t, 15*time.Second, func() bool {
		got = rec.find("advisory: waiting for a server connection of the pooler")
		return got != nil
	}, "a record naming the pooler's pool; records: %v", rec.messages())
	assert.Positive(t, clWaiting(t, b), "the waiting Lock is queued in the pooler")
	assert.Equal(t, slog.LevelWarn, got["level"])
	assert.Contains(t, got["hint"], "default_pool_size")
	assert.Contains(t, got["hint"], "pool_max_conns")
	assert.EqualValues(t, 2, got["held"])
	assert.Nil(t, rec.find("advisory: waiting for a lock this Manager holds"), "not the nested-Lock hint")

	require.NoError(t, l2.Unlock(ctx)) // a server connection for the waiter, which waits for l1
	require.NoError(t, l1.Unlock(ctx))
	require.NoError(t, <-waited)
}

// clWaiting is the number of clients PgBouncer has waiting for a server connection.
func clWaiting(t *testing.T, b *pgtest.PgBouncer) int {
	t.Helper()
	rows, err := b.Show(ctxT(t), "POOLS")
	require.NoError(t, err)
	n := 0
	for _, r := range rows {
		v, err := strconv.Atoi(r["cl_waiting"])
		require.NoError(t, err, "%v", r)
		n += v
	}
	return n
}

// TestACappedManagersWaitIsNotBlamedOnThePooler (issue 43, item 10): behind PgBouncer in
// transaction mode with room to spare, a Manager capped at pool_max_conns=3 (the cap the
// docs give for a pooler that cannot be resized) with two locks held and a third Lock
// waiting for one of them takes every connection of its own pool, so its wait record
// cannot read the holders; that is the cap at work and ordinary contention: Info
// "waiting for lock", never the Warn that blames the pooler's pool or the nested-Lock
// hint.
func TestACappedManagersWaitIsNotBlamedOnThePooler(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(6))
	rec := &recorder{}
	m, err := advisory.New(ctxT(t), b.DSN()+" pool_max_conns=3", advisory.WithLogger(slog.New(rec)))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	require.Equal(t, advisory.HoldingTransaction, m.Holding())
	ctx, name := ctxT(t), t.Name()
	held := make(chan *advisory.Lock, 2)
	for _, n := range []string{name, name + "/other"} {
		go func() {
			l, err := m.Lock(ctx, n)
			assert.NoError(t, err)
			held <- l
		}()
	}
	l1, l2 := <-held, <-held
	require.NotNil(t, l1)
	require.NotNil(t, l2)
	waited := make(chan error, 1)
	go func() {
		l, err := m.Lock(ctx, name)
		if err == nil {
			err = l.Unlock(ctx)
		}
		waited <- err
	}()
	var got map[string]any
	eventually(t, 15*time.Second, func() bool {
		got = rec.find("advisory: waiting for lock")
		return got != nil
	}, "a wait record; records: %v", rec.messages())
	assert.Equal(t, slog.LevelInfo, got["level"])
	assert.Contains(t, got["holders_error"], "deadline", "its own pool was full: the holders could not be read")
	assert.Nil(t, rec.find("advisory: waiting for a server connection of the pooler"), "not blamed on the pooler")
	assert.Nil(t, rec.find("advisory: waiting for a lock this Manager holds"), "not the nested-Lock hint")
	require.NoError(t, l1.Unlock(ctx)) // one of them is the waiter's lock (they arrive in either order)
	require.NoError(t, l2.Unlock(ctx))
	require.NoError(t, <-waited)
}
