package advisory_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestHeartbeatOption: WithHeartbeat refuses a negative period, one under 100ms, and
// (issue 46, item 4) one over 24h, naming the bound: 720h passed New and then failed every
// waiting Lock (lock_timeout "2592000000ms" is over PostgreSQL's 2147483647 ms).
func TestHeartbeatOption(t *testing.T) {
	t.Parallel()
	for _, bad := range []time.Duration{-time.Second, time.Nanosecond, 99 * time.Millisecond,
		24*time.Hour + time.Nanosecond, 720 * time.Hour, 1<<63 - 1} {
		_, err := advisory.New(context.Background(), "host=127.0.0.1 port=1", advisory.WithHeartbeat(bad))
		require.ErrorIs(t, err, advisory.ErrInvalidOption, "%v", bad)
		require.ErrorContains(t, err, "from 100ms to 24h0m0s", "%v", bad)
	}
	for _, good := range []time.Duration{0, 100 * time.Millisecond, time.Minute, 24 * time.Hour} {
		_, err := advisory.New(context.Background(), "host=127.0.0.1 port=1 connect_timeout=1", advisory.WithHeartbeat(good))
		require.NotErrorIs(t, err, advisory.ErrInvalidOption, "%v", good)
	}
}

// TestHeartbeatLongest (issue 46, item 4): the longest heartbeat New accepts (24h) works
// for a waiting Lock, whose wait runs in slices under lock_timeout = the heartbeat: it
// queues on the server behind a holder and is granted on its release.
func TestHeartbeatLongest(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	m := newManager(t, nil, advisory.WithHeartbeat(24*time.Hour))
	holder := newManager(t, nil)
	name := t.Name()
	held, err := holder.Lock(ctx, name)
	require.NoError(t, err)
	got := make(chan error, 1)
	var l *advisory.Lock
	go func() {
		var err error
		l, err = m.Lock(ctx, name)
		got <- err
	}()
	waitForWaiters(t, held.Key(), 1)
	require.NoError(t, held.Unlock(ctx))
	require.NoError(t, <-got)
	requireHeldBy(t, l.Key(), l.PID())
	require.NoError(t, l.Unlock(ctx))
}

// TestPgBouncerIdleReaper: PgBouncer's client_idle_timeout does not reap a client linked
// to a server connection, which in session mode is every client: a lock held through it,
// idle well past the timeout, stays held without a heartbeat (WithHeartbeat(0): behind a
// proxy the default is 2s).
func TestPgBouncerIdleReaper(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolSession, pgtest.WithClientIdleTimeout(2))
	ctx := ctxT(t)
	name, key := t.Name(), advisory.KeyOf(t.Name())
	m, err := advisory.New(ctx, b.DSN(), advisory.WithHeartbeat(0))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	time.Sleep(5 * time.Second)
	requireOpen(t, "Lock", l.Done(), l.Err)
	requireHeldBy(t, key, l.PID())
	require.NoError(t, l.Unlock(ctx))
	requireFree(t, key)
}

// TestHeartbeatIdleReaper: behind an idle reaper (pgtest.IdleProxy in front of a
// session-mode PgBouncer, closing connections idle 2 s), a held lock without a heartbeat
// (WithHeartbeat(0)) is lost and its pg_locks row freed; with WithHeartbeat(500ms) a Lock and a Session stay
// held through 5 s (a 4x margin on the beat), BeginFunc and Holders work between beats,
// and Unlock and Close release them.
func TestHeartbeatIdleReaper(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolSession)
	proxy, err := pgtest.StartIdleProxy("127.0.0.1:"+strconv.Itoa(b.Port()), 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	dsn := strings.Replace(b.DSN(), "port="+strconv.Itoa(b.Port()), "port="+strconv.Itoa(proxy.Port()), 1)
	runAtOnce(t, // each waits on the reaper's timers: all three at once, as soon as the parent runs
		subtest{"without a heartbeat the lock is lost", func(t *testing.T) { heartbeatReaped(t, dsn) }},
		subtest{"with a heartbeat it stays held", func(t *testing.T) { heartbeatHolds(t, dsn) }},
		subtest{"with a heartbeat shared holdings stay held", func(t *testing.T) { heartbeatHoldsShared(t, dsn) }})
}

func heartbeatReaped(t *testing.T, dsn string) {
	ctx := ctxT(t)
	name, key := t.Name(), advisory.KeyOf(t.Name())
	m, err := advisory.New(ctx, dsn, advisory.WithHeartbeat(0)) // behind a proxy the default is 2s
	require.NoError(t, err)
	t.Cleanup(m.Close)
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	requireHeldBy(t, key, l.PID())
	select {
	case <-l.Done():
	case <-time.After(30 * time.Second):
		t.Fatal("the lock was not lost within 30 s of a 2 s idle reaper")
	}
	require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	eventually(t, 20*time.Second, func() bool { return len(lockRows(t, key)) == 0 },
		"pg_locks rows of key %d after the loss", key)
	requireNoAcquired(t, m)
}

func heartbeatHolds(t *testing.T, dsn string) {
	ctx := ctxT(t)
	name, key := t.Name(), advisory.KeyOf(t.Name())
	sname, skey := t.Name()+"/session", advisory.KeyOf(t.Name()+"/session")
	m, err := advisory.New(ctx, dsn, advisory.WithHeartbeat(500*time.Millisecond))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	l, err := m.Lock(ctx, name)
	require.NoError(t, err)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Lock(ctx, sname))

	time.Sleep(2500 * time.Millisecond) // past the reaper's limit once
	require.NoError(t, l.BeginFunc(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	}), "a transaction between beats")
	time.Sleep(2500 * time.Millisecond)

	requireOpen(t, "Lock", l.Done(), l.Err)
	requireOpen(t, "Session", s.Done(), s.Err)
	requireHeldBy(t, key, l.PID())
	requireHeldBy(t, skey, s.PID())
	hs, err := m.Holders(ctx, name)
	require.NoError(t, err)
	require.Len(t, hs, 1)
	assert.Equal(t, name, hs[0].Name, "the beat's statement keeps the lock's name in pg_stat_activity")
	require.NoError(t, l.Unlock(ctx))
	require.NoError(t, s.Close(ctx))
	requireFree(t, key)
	requireFree(t, skey)
	requireNoAcquired(t, m)
}

// requireOpen fails the test if done is closed: the handle was lost.
func requireOpen(t *testing.T, what string, done <-chan struct{}, errOf func() error) {
	t.Helper()
	select {
	case <-done:
		t.Fatalf("the %s was lost: %v", what, errOf())
	default:
	}
}
