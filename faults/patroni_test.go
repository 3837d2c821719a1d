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
// sample configuration), asynchronous replication (Patroni's default). A holder (default
// options, through HAProxy) holds a lock and does fenced writes in a loop; a waiter
// (another Manager through HAProxy) waits for it. The primary's PostgreSQL is frozen
// (SIGSTOP of the postmaster and all its children) and its Patroni killed; Patroni
// promotes the replica once the leader key expires (ttl 10 s). The holder must be told
// (Done, ErrLockLost) before the waiter is granted on the promoted primary, the waiter
// granted within a bound, no fenced write of the old holder committed on the new primary
// after that grant, and the old holder's token refused there. Before the fixes the
// holder was never told (105 s) and the two held the lock together for 60 s.
func TestPatroniFrozenPrimary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: a Patroni cluster takes tens of seconds")
	}
	c := pgtest.PatroniForTest(t, pgtest.PatroniOptions{})
	defer func() {
		if t.Failed() {
			t.Log(c.Logs())
		}
	}()
	ctx := ctxT(t, 90*time.Second)
	old, err := c.Leader(ctx)
	require.NoError(t, err)
	holder, err := advisory.New(ctx, c.DSN())
	require.NoError(t, err)
	t.Cleanup(holder.Close)
	b := holder.Bounds()
	require.True(t, b.Proxied, "HAProxy is a proxy in the path")
	require.Positive(t, b.HeartbeatTold, "a heartbeat by default behind a proxy")
	require.NoError(t, holder.CreateFenceTable(ctx))
	setupWrites(t, ctx, c, old)
	waiterM, err := advisory.New(ctx, c.DSN())
	require.NoError(t, err)
	t.Cleanup(waiterM.Close)

	name := t.Name()
	l, err := holder.Lock(ctx, name)
	require.NoError(t, err)
	tok, err := l.Token(ctx)
	require.NoError(t, err)
	w := startFencedWriter(l, tok)
	told := make(chan time.Time, 1)
	go func() { <-l.Done(); told <- time.Now() }()
	waiter := startWaiter(ctx, waiterM, name, l)
	waitQueued(t, ctx, old.DSN(), l.Key())
	<-w.first // fenced writes commit before the fault

	_, err = c.Freeze(old)
	require.NoError(t, err)
	require.NoError(t, c.KillPatroni(old))
	fault := time.Now()

	var toldAt time.Time
	select {
	case toldAt = <-told:
	case <-time.After(b.HeartbeatTold + 15*time.Second):
		t.Fatalf("the holder was not told within %v of the freeze", b.HeartbeatTold+15*time.Second)
	}
	require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
	var res waitResult
	select {
	case res = <-waiter:
	case <-ctx.Done():
		t.Fatalf("the waiter was not granted within the test's 90 s")
	}
	require.NoError(t, res.err, "the waiter's last attempt (%d attempts)", res.attempts)
	defer res.lock.Unlock(context.Background())
	w.stop()
	t.Logf("holder told %v after the fault (HeartbeatTold %v); waiter granted %v after the fault, %v after the holder was told, %d attempts; %d fenced writes committed, the last %v before the fault",
		toldAt.Sub(fault).Round(time.Millisecond), b.HeartbeatTold, res.at.Sub(fault).Round(time.Millisecond),
		res.at.Sub(toldAt).Round(time.Millisecond), res.attempts, w.committed, fault.Sub(w.lastAt).Round(time.Millisecond))

	require.False(t, res.holderBelieved, "overlap: the waiter was granted while the holder still believed it held the lock")
	require.True(t, toldAt.Before(res.at), "the holder was told after the waiter's grant")
	// The leader key expires at most ttl (10 s) after the fault; Patroni promotes within
	// a loop_wait; HAProxy sees it within a check. 30 s leaves a busy machine its slack.
	require.Less(t, res.at.Sub(fault), 30*time.Second, "the waiter's grant after the fault")
	promoted, err := c.WaitNewLeader(ctx, old)
	require.NoError(t, err)
	require.Equal(t, []uint32{res.lock.PID()}, holdersAt(t, promoted.DSN(), res.lock.Key()), "the waiter holds the lock on the promoted primary")
	requireNoStaleWrites(t, ctx, promoted.DSN(), res.at)
	err = checkOn(t, waiterM, promoted.DSN(), name, tok)
	require.ErrorIs(t, err, advisory.ErrStaleToken, "the old holder's token %d on the new primary", tok)
	next, err := res.lock.Token(ctx)
	require.NoError(t, err)
	require.Greater(t, next, tok, "the new holder's token")
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
