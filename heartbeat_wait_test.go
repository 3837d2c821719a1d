package advisory_test

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestHeartbeatCoversWaits (issue 37, item 2): behind an idle reaper (pgtest.IdleProxy,
// closing connections silent for 2 s, in front of a session-mode PgBouncer) a Manager
// made WithHeartbeat(500ms) keeps every connection it keeps open talking, waits too: a
// Lock waits 4 s for a lock held elsewhere and gets it; a Session that holds one lock
// waits 4 s in Session.Lock for another and gets it, still holding the first. Both failed
// at 2.2 s with an unexpected EOF (and the Session lost the lock it held).
func TestHeartbeatCoversWaits(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolSession)
	proxy, err := pgtest.StartIdleProxy("127.0.0.1:"+strconv.Itoa(b.Port()), 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	dsn := strings.Replace(b.DSN(), "port="+strconv.Itoa(b.Port()), "port="+strconv.Itoa(proxy.Port()), 1)
	var both []subtest // each waits out two 4 s holds: both at once, as soon as the parent runs
	for _, h := range []advisory.Holding{advisory.HoldingSession, advisory.HoldingTransaction} {
		both = append(both, subtest{h.String(), func(t *testing.T) { heartbeatWaits(t, dsn, h) }})
	}
	runAtOnce(t, both...)
}

// heartbeatWaits is TestHeartbeatCoversWaits for a Manager of holding h behind the reaper at dsn.
func heartbeatWaits(t *testing.T, dsn string, h advisory.Holding) {
	ctx := ctxT(t)
	m, err := advisory.New(ctx, dsn, advisory.WithHeartbeat(500*time.Millisecond), advisory.WithHolding(h))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	holder := newManager(t, nil)
	name := t.Name()
	held, err := holder.Lock(ctx, name)
	require.NoError(t, err)
	time.AfterFunc(4*time.Second, func() { held.Unlock(ctx) })
	l, err := m.Lock(ctx, name)
	require.NoError(t, err, "a Lock waited past the reaper's 2 s")
	requireHeldBy(t, l.Key(), l.PID())
	require.NoError(t, l.Unlock(ctx))

	S, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, S.Lock(ctx, name+"/first"))
	held, err = holder.Lock(ctx, name+"/second")
	require.NoError(t, err)
	time.AfterFunc(4*time.Second, func() { held.Unlock(ctx) })
	require.NoError(t, S.Lock(ctx, name+"/second"), "a Session's Lock waited past the reaper's 2 s")
	requireOpen(t, "Session", S.Done(), S.Err)
	requireHeldBy(t, advisory.KeyOf(name+"/first"), S.PID())
	requireHeldBy(t, advisory.KeyOf(name+"/second"), S.PID())
	require.NoError(t, S.Close(ctx))
	requireNoAcquired(t, m)
}

// TestHeartbeatCoversTheListeningConnection (issue 37, item 2): the Manager's LISTEN
// connection (its observers' hub), silent while no notification comes, speaks once a
// beat too: behind an idle reaper in front of the server (2 s), with WithHeartbeat(500ms),
// the hub's backend is the same 5 s later. Without, the reaper cut it every 2 s and the
// hub reconnected.
func TestHeartbeatCoversTheListeningConnection(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	proxy, err := pgtest.StartIdleProxy("127.0.0.1:"+strconv.Itoa(srv.Port()), 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	ctx := ctxT(t)
	app := "hub-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	dsn := pgtest.WithPairs(strings.Replace(srv.DSN(), "port="+strconv.Itoa(srv.Port()), "port="+strconv.Itoa(proxy.Port()), 1),
		"application_name="+app, "host=127.0.0.1")
	m, err := advisory.New(ctx, dsn, advisory.WithHeartbeat(500*time.Millisecond), advisory.WithLeaderRecheck(time.Hour))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	_, err = m.Observe(ctx, t.Name())
	require.NoError(t, err)
	hub := func() uint32 {
		var pid uint32
		err := admin.QueryRow(ctx, `SELECT coalesce(max(pid), 0) FROM pg_stat_activity
			WHERE application_name = $1 AND query IN ('LISTEN advisory_leader', 'SELECT pg_catalog.pg_backend_pid()')`, app).Scan(&pid)
		require.NoError(t, err)
		return pid
	}
	var first uint32
	eventually(t, 10*time.Second, func() bool { first = hub(); return first != 0 }, "the hub listening")
	time.Sleep(5 * time.Second)
	require.Equal(t, first, hub(), "the hub's connection was cut and opened again")
}
