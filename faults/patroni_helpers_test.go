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
