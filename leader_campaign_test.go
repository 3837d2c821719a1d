package advisory_test

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestLeadCampaignsAgainAfterATransientError (issue 37, item 5): a Publish of LeadAs
// waits on the leader table's row, which another transaction has locked, and is
// cancelled (pg_cancel_backend: 57014). The lock was never lost; LeadAs must not end for
// good: it releases the lock, backs off and campaigns again, and leads once the row is
// free. For both kinds of holding (a transaction holding publishes beside the holding,
// on another connection: that one is cancelled).
func TestLeadCampaignsAgainAfterATransientError(t *testing.T) {
	t.Parallel()
	for _, kind := range []advisory.Holding{advisory.HoldingSession, advisory.HoldingTransaction} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			retries := make(chan advisory.LockEvent, 16)
			rec := &recorder{}
			m := newManager(t, nil, advisory.WithLeaderTable(), advisory.WithHolding(kind), advisory.WithLogger(slog.New(rec)),
				advisory.WithHooks(advisory.Hooks{LeadRetry: func(ev advisory.LockEvent) { retries <- ev }}))
			require.NoError(t, m.CreateLeaderTable(ctxT(t)))
			name := t.Name()
			l, err := m.Lock(ctxT(t), name)
			require.NoError(t, err)
			require.NoError(t, l.Publish(ctxT(t), "before")) // the row the next Publish waits on
			require.NoError(t, l.Unlock(ctxT(t)))

			tx, err := admin.Begin(ctxT(t))
			require.NoError(t, err)
			defer tx.Rollback(context.Background())
			var rowLocker uint32
			require.NoError(t, tx.QueryRow(ctxT(t), "SELECT pg_backend_pid() FROM "+advisory.DefaultLeaderTable+
				" WHERE key = $1 AND NOT pair FOR UPDATE", int64(advisory.KeyOf(name))).Scan(&rowLocker))

			ctx, cancel := context.WithCancel(ctxT(t))
			defer cancel()
			started, done := make(chan struct{}, 8), make(chan error, 1)
			go func() {
				done <- m.LeadAs(ctx, name, "after", func(ctx context.Context) error {
					started <- struct{}{}
					<-ctx.Done()
					return ctx.Err()
				})
			}()
			var pid uint32
			eventually(t, 10*time.Second, func() bool {
				return admin.QueryRow(ctxT(t), `SELECT pid FROM pg_stat_activity
					WHERE $1 = ANY(pg_blocking_pids(pid))`, int32(rowLocker)).Scan(&pid) == nil
			}, "a Publish waiting on the leader table's row")
			_, err = admin.Exec(ctxT(t), "SELECT pg_cancel_backend($1)", int32(pid))
			require.NoError(t, err)

			select {
			case err := <-done:
				t.Fatalf("LeadAs ended after a cancelled Publish: %v", err)
			case <-started:
				t.Fatal("fn ran although nothing was published")
			case <-time.After(time.Second):
			}
			ev := <-retries
			assert.Equal(t, "publish", ev.Reason)
			assert.Equal(t, name, ev.Name)
			assert.Equal(t, advisory.KeyOf(name), ev.Key)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, ev.Err, &pgErr)
			assert.Equal(t, "57014", pgErr.Code)
			assert.Positive(t, ev.Wait, "the back-off")
			logged := rec.find("advisory: lead: campaign failed, campaigning again")
			require.NotNil(t, logged)
			assert.Equal(t, slog.LevelWarn, logged["level"])
			assert.Equal(t, "publish", logged["step"])
			require.NoError(t, tx.Rollback(ctxT(t)))
			select {
			case <-started:
			case err := <-done:
				t.Fatalf("LeadAs ended: %v", err)
			case <-time.After(15 * time.Second):
				t.Fatal("LeadAs never led again")
			}
			ld, err := m.Leader(ctxT(t), name)
			require.NoError(t, err)
			require.Equal(t, "after", ld.Value)
			cancel()
			require.ErrorIs(t, <-done, context.Canceled)
			requireFree(t, advisory.KeyOf(name))
		})
	}
}

// TestLeadCampaignsAgainAfterAFailedDrain: a drain that fails (a session of a
// WithWorkRoles role the candidate may not terminate) does not end Lead: it campaigns
// again, reporting each failure, and leads once the session has ended.
func TestLeadCampaignsAgainAfterAFailedDrain(t *testing.T) {
	t.Parallel()
	name := t.Name()
	holder, worker := tempRole(t), tempRole(t)
	l, err := newManager(t, []string{"user=" + holder, "password=pw"}).Lock(ctxT(t), name)
	require.NoError(t, err)
	work := sleepingSession(t, workConn(t, l, dsn(t, "user="+worker, "password=pw")))
	terminate(t, l.PID())
	<-l.Done()

	retries := make(chan advisory.LockEvent, 64)
	m := newManager(t, []string{"user=" + holder, "password=pw"}, advisory.WithDrainWait(0), advisory.WithWorkRoles(worker),
		advisory.WithHooks(advisory.Hooks{LeadRetry: func(ev advisory.LockEvent) {
			select {
			case retries <- ev:
			default:
			}
		}}))
	led, done := make(chan struct{}), make(chan error, 1)
	go func() {
		done <- m.Lead(ctxT(t), name, func(context.Context) error { close(led); return nil })
	}()
	for range 2 {
		select {
		case ev := <-retries:
			assert.Equal(t, "drain", ev.Reason)
			require.ErrorIs(t, ev.Err, advisory.ErrWorkNotDrained)
		case err := <-done:
			t.Fatalf("Lead ended after a failed drain: %v", err)
		case <-time.After(10 * time.Second):
			t.Fatal("no campaign retried")
		}
	}
	require.False(t, backendGone(t, work))
	terminate(t, work)
	require.NoError(t, <-done)
	select {
	case <-led:
	default:
		t.Fatal("Lead returned without leading")
	}
}

// TestLeadReturnsWhatRetryingCannotMend: a leader table that does not exist and a closed
// Manager end Lead at once, however often it would try.
func TestLeadReturnsWhatRetryingCannotMend(t *testing.T) {
	t.Parallel()
	fn := func(context.Context) error { t.Error("fn ran"); return nil }
	missing := newManager(t, nil, advisory.WithLeaderTable("no_such_leader_table"))
	require.ErrorIs(t, missing.LeadAs(ctxT(t), t.Name(), "v", fn), advisory.ErrNoLeaderTable)
	requireFree(t, advisory.KeyOf(t.Name()))

	closed := newManager(t, nil)
	held, err := newManager(t, nil).Lock(ctxT(t), t.Name())
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- closed.Lead(ctxT(t), t.Name(), fn) }()
	waitForWaiters(t, advisory.KeyOf(t.Name()), 1)
	closed.Close()
	require.ErrorIs(t, <-done, advisory.ErrClosed)
	require.NoError(t, held.Unlock(ctxT(t)))
}
