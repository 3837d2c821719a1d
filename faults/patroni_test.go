package faults_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestPatroniFrozenPrimary (issue 44, the worst case, on a real cluster): Patroni + etcd
// + HAProxy from Debian, HAProxy without on-marked-down shutdown-sessions (Patroni's
// sample configuration), asynchronous replication (Patroni's default). Two holders
// (default options, through HAProxy) hold a lock each: one does fenced writes
// (BeginFunc) in a loop, the other is idle, so that only the heartbeat can tell it; a
// waiter (another Manager through HAProxy) waits for each. The primary's PostgreSQL is
// frozen (SIGSTOP of the postmaster and all its children) and its Patroni killed;
// Patroni promotes the replica once the leader key expires. Each holder must be told
// (Done, ErrLockLost) before its waiter is granted on the promoted primary, the waiters
// granted within a bound, no fenced write of the old holder committed on the new primary
// after the grant, and the old holder's token refused there. Before the fixes the holder
// was never told (105 s) and the two held the lock together for 60 s.
func TestPatroniFrozenPrimary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a Patroni cluster takes tens of seconds")
	}
	// ttl 15 s: at least HeartbeatTold (7 s) + the library's minimum margin (5 s), the
	// least a cluster manager may wait before handing the lock on (docs/keepalive.md);
	// Patroni's default is 30 s. With ttl 10 the idle holder was told 2.9 s before the grant.
	const ttl = 15
	c := pgtest.PatroniForTest(t, pgtest.PatroniOptions{TTL: ttl})
	defer func() {
		if t.Failed() {
			t.Log(c.Logs())
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	old, err := c.Leader(ctx)
	require.NoError(t, err)
	holder, err := advisory.New(ctx, c.DSN())
	require.NoError(t, err)
	t.Cleanup(holder.Close)
	b := holder.Bounds()
	require.True(t, b.Proxied, "HAProxy is a proxy in the path")
	require.Positive(t, b.HeartbeatTold, "a heartbeat by default behind a proxy")
	require.LessOrEqual(t, b.HeartbeatTold+5*time.Second, ttl*time.Second, "the ttl leaves the heartbeat its margin")
	require.NoError(t, holder.CreateFenceTable(ctx))
	setupWrites(t, ctx, c, old)
	waiterM, err := advisory.New(ctx, c.DSN())
	require.NoError(t, err)
	t.Cleanup(waiterM.Close)
	t.Cleanup(cancel) // first: the waiters stop before their Managers close

	name, idleName := t.Name(), t.Name()+"/idle"
	l, err := holder.Lock(ctx, name)
	require.NoError(t, err)
	tok, err := l.Token(ctx)
	require.NoError(t, err)
	w := startFencedWriter(l, tok)
	busy := startContest(t, ctx, l, waiterM, old.DSN())
	idleLock, err := holder.Lock(ctx, idleName) // held, never used: only the heartbeat watches it
	require.NoError(t, err)
	idle := startContest(t, ctx, idleLock, waiterM, old.DSN())
	<-w.first // fenced writes commit before the fault

	_, err = c.Freeze(old)
	require.NoError(t, err)
	require.NoError(t, c.KillPatroni(old))
	fault := time.Now()

	told := b.HeartbeatTold + 15*time.Second
	busy.outcome(t, "the writing holder", fault, told)
	defer busy.res.lock.Unlock(context.Background())
	idle.outcome(t, "the idle holder", fault, told)
	defer idle.res.lock.Unlock(context.Background())
	w.stop()
	t.Logf("HeartbeatTold %v; %d fenced writes committed, the last %v before the fault",
		b.HeartbeatTold, w.committed, fault.Sub(w.lastAt).Round(time.Millisecond))

	promoted, err := c.WaitNewLeader(ctx, old)
	require.NoError(t, err)
	for _, x := range []*contest{busy, idle} {
		require.Equal(t, []uint32{x.res.lock.PID()}, holdersAt(t, promoted.DSN(), x.res.lock.Key()),
			"the waiter holds the lock on the promoted primary")
	}
	requireNoStaleWrites(t, ctx, promoted.DSN(), busy.res.at)
	err = checkOn(t, waiterM, promoted.DSN(), name, tok)
	require.ErrorIs(t, err, advisory.ErrStaleToken, "the old holder's token %d on the new primary", tok)
	next, err := busy.res.lock.Token(ctx)
	require.NoError(t, err)
	require.Greater(t, next, tok, "the new holder's token")
}

// contest is one lock's holder and the waiter for it.
type contest struct {
	held   *advisory.Lock
	told   chan time.Time // when held's Done closed
	waiter <-chan waitResult
	res    waitResult
}

// startContest watches held's Done and starts a waiter for its lock on m, and blocks
// until that waiter is queued on the server at dsn.
func startContest(t *testing.T, ctx context.Context, held *advisory.Lock, m *advisory.Manager, dsn string) *contest {
	t.Helper()
	x := &contest{held: held, told: make(chan time.Time, 1)}
	go func() { <-held.Done(); x.told <- time.Now() }()
	x.waiter = startWaiter(ctx, m, held.Name(), held)
	waitQueued(t, ctx, dsn, held.Key())
	return x
}

// outcome asserts that the holder is told (ErrLockLost) within told of the fault, that
// the waiter is then granted, after the holder was told, never while it still believed
// it held the lock, and within 35 s of the fault; and logs the times.
func (x *contest) outcome(t *testing.T, who string, fault time.Time, told time.Duration) {
	t.Helper()
	var toldAt time.Time
	select {
	case toldAt = <-x.told:
	case <-time.After(told - time.Since(fault)):
		t.Fatalf("%s was not told within %v of the fault", who, told)
	}
	require.ErrorIs(t, x.held.Err(), advisory.ErrLockLost, who)
	select {
	case x.res = <-x.waiter:
	case <-time.After(60*time.Second - time.Since(fault)):
		t.Fatalf("%s's waiter was not granted within 60 s of the fault", who)
	}
	require.NoError(t, x.res.err, "%s's waiter, its last attempt (%d attempts)", who, x.res.attempts)
	t.Logf("%s told %v after the fault; its waiter granted %v after the fault, %v after it was told (%d attempts)",
		who, toldAt.Sub(fault).Round(time.Millisecond), x.res.at.Sub(fault).Round(time.Millisecond),
		x.res.at.Sub(toldAt).Round(time.Millisecond), x.res.attempts)
	require.False(t, x.res.holderBelieved, "overlap: %s's waiter was granted while it still believed it held the lock", who)
	require.True(t, toldAt.Before(x.res.at), "%s was told after its waiter's grant", who)
	// The leader key expires at most ttl (15 s) after the fault; Patroni promotes within
	// a loop_wait; HAProxy sees it within a check. 35 s leaves a busy machine its slack.
	require.Less(t, x.res.at.Sub(fault), 35*time.Second, "%s's waiter granted after the fault", who)
}

// setupWrites creates the table of fenced writes on the leader and waits until every
// node has replayed it (and the fencing table before it).
func setupWrites(t *testing.T, ctx context.Context, c *pgtest.PatroniCluster, leader *pgtest.PatroniNode) {
	t.Helper()
	conn := connect(t, leader.DSN())
	_, err := conn.Exec(ctx, `CREATE TABLE patroni_writes (seq int, tok bigint,
		at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	require.NoError(t, err)
	var lsn string
	require.NoError(t, conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn))
	for _, n := range c.Nodes {
		if n == leader {
			continue
		}
		replica := connect(t, n.DSN())
		require.Eventually(t, func() bool {
			var ok bool
			err := replica.QueryRow(ctx, "SELECT pg_last_wal_replay_lsn() >= $1::pg_lsn", lsn).Scan(&ok)
			return err == nil && ok
		}, 30*time.Second, 20*time.Millisecond, "%s has not replayed the tables", n.Name)
	}
}

// fencedWriter inserts rows through the holder's BeginFunc in a loop until the lock is
// lost.
type fencedWriter struct {
	first     chan struct{} // closed at the 20th committed write
	done      chan struct{}
	committed int
	lastAt    time.Time // the last committed write's confirmation
}

func startFencedWriter(l *advisory.Lock, tok int64) *fencedWriter {
	w := &fencedWriter{first: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(w.done)
		for seq := 1; ; seq++ {
			select {
			case <-l.Done():
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			err := l.BeginFunc(ctx, func(tx pgx.Tx) error {
				_, err := tx.Exec(ctx, "INSERT INTO patroni_writes (seq, tok) VALUES ($1, $2)", seq, tok)
				return err
			})
			cancel()
			if err == nil {
				w.committed, w.lastAt = w.committed+1, time.Now()
				if w.committed == 20 {
					close(w.first)
				}
			}
			time.Sleep(10 * time.Millisecond) // a write every ~10 ms, not a busy loop
		}
	}()
	return w
}

// stop waits until the writer has seen the loss (it returns once Done is closed and its
// current BeginFunc has returned).
func (w *fencedWriter) stop() { <-w.done }

// waitResult is the waiter's outcome.
type waitResult struct {
	lock           *advisory.Lock
	err            error
	at             time.Time // granted
	attempts       int
	holderBelieved bool // the holder's Done was still open at the grant
}

// startWaiter calls Lock until it is granted or ctx ends, as a process waiting for the
// lock would, each attempt bounded by 20 s, and records whether the holder still
// believed it held the lock at the grant.
func startWaiter(ctx context.Context, m *advisory.Manager, name string, holder *advisory.Lock) <-chan waitResult {
	out := make(chan waitResult, 1)
	go func() {
		var r waitResult
		for ctx.Err() == nil {
			r.attempts++
			actx, cancel := context.WithTimeout(ctx, 20*time.Second)
			r.lock, r.err = m.Lock(actx, name)
			cancel()
			if r.err == nil {
				r.at = time.Now()
				select {
				case <-holder.Done():
				default:
					r.holderBelieved = true
				}
				break
			}
			select { // no server behind HAProxy for a while: do not spin
			case <-ctx.Done():
			case <-time.After(100 * time.Millisecond):
			}
		}
		out <- r
	}()
	return out
}

// waitQueued blocks until a Lock waits for key on the server at dsn.
func waitQueued(t *testing.T, ctx context.Context, dsn string, key advisory.Key) {
	t.Helper()
	conn := connect(t, dsn)
	require.Eventually(t, func() bool {
		var n int
		err := conn.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE locktype = 'advisory'
			AND NOT granted AND classid = $1 AND objid = $2`,
			uint32(uint64(key)>>32), uint32(key)).Scan(&n)
		return err == nil && n > 0
	}, 30*time.Second, 20*time.Millisecond, "the waiter is not queued on the primary")
}

// requireNoStaleWrites asserts that no row of the old holder committed on the new
// primary after the new holder's grant.
func requireNoStaleWrites(t *testing.T, ctx context.Context, dsn string, granted time.Time) {
	t.Helper()
	var late, all int
	require.NoError(t, connect(t, dsn).QueryRow(ctx,
		"SELECT count(*) FILTER (WHERE at >= $1), count(*) FROM patroni_writes", granted).Scan(&late, &all))
	require.Zero(t, late, "fenced writes of the old holder committed on the new primary after the waiter's grant")
	t.Logf("%d fenced writes of the old holder replicated to the new primary, 0 after the grant", all)
}
