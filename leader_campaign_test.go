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
// good: it releases the lock, backs off and campaigns again, reported at Warn and to the
// LeadRetry hook, and leads once the row is free. For both kinds of holding (a
// transaction holding publishes beside the holding, on another connection: that one is
// cancelled).
func TestLeadCampaignsAgainAfterATransientError(t *testing.T) {
	t.Parallel()
	for _, kind := range []advisory.Holding{advisory.HoldingSession, advisory.HoldingTransaction} {
		t.Run(kind.String(), func(t *testing.T) {
			t.Parallel()
			retries, rec := make(chan advisory.LockEvent, 16), &recorder{}
			m := newManager(t, nil, advisory.WithLeaderTable(), advisory.WithHolding(kind), advisory.WithLogger(slog.New(rec)),
				advisory.WithHooks(advisory.Hooks{LeadRetry: func(ev advisory.LockEvent) { offer(retries, ev) }}))
			name := t.Name()
			rowLocker, free := lockLeaderRow(t, m, name)
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
			cancelBlockedBy(t, rowLocker)
			select {
			case err := <-done:
				t.Fatalf("LeadAs ended after a cancelled Publish: %v", err)
			case <-started:
				t.Fatal("fn ran although nothing was published")
			case <-time.After(time.Second):
			}
			requireRetried(t, <-retries, rec, name, "publish", "57014")
			free()
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

// offer sends ev on ch unless ch is full: a hook must not block.
func offer(ch chan<- advisory.LockEvent, ev advisory.LockEvent) {
	select {
	case ch <- ev:
	default:
	}
}

// lockLeaderRow gives name a row in m's leader table, as a dead holder would leave it
// (pid 0: no live session; a release withdraws its own row), and locks that row in a
// transaction of the admin pool; it returns that transaction's backend pid and a
// function that ends it.
func lockLeaderRow(t *testing.T, m *advisory.Manager, name string) (uint32, func()) {
	t.Helper()
	require.NoError(t, m.CreateLeaderTable(ctxT(t)))
	_, err := admin.Exec(ctxT(t), "INSERT INTO "+advisory.DefaultLeaderTable+
		" (key, pair, pid, backend_start, value, published_at) VALUES ($1, false, 0, 'epoch', 'before', now())",
		int64(advisory.KeyOf(name)))
	require.NoError(t, err)
	tx, err := admin.Begin(ctxT(t))
	require.NoError(t, err)
	t.Cleanup(func() { tx.Rollback(context.Background()) })
	var pid uint32
	require.NoError(t, tx.QueryRow(ctxT(t), "SELECT pg_backend_pid() FROM "+advisory.DefaultLeaderTable+
		" WHERE key = $1 AND NOT pair FOR UPDATE", int64(advisory.KeyOf(name))).Scan(&pid))
	return pid, func() { require.NoError(t, tx.Rollback(ctxT(t))) }
}

// cancelBlockedBy waits for a statement that waits on a lock of backend blocker (a
// Publish, here) and cancels it (pg_cancel_backend).
func cancelBlockedBy(t *testing.T, blocker uint32) {
	t.Helper()
	var pid uint32
	eventually(t, 10*time.Second, func() bool {
		return admin.QueryRow(ctxT(t), "SELECT pid FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid))",
			int32(blocker)).Scan(&pid) == nil
	}, "a statement waiting on backend %d", blocker)
	_, err := admin.Exec(ctxT(t), "SELECT pg_cancel_backend($1)", int32(pid))
	require.NoError(t, err)
}

// requireRetried asserts a LeadRetry event and its Warn record: the step that failed,
// with the SQLSTATE code, and a back-off.
func requireRetried(t *testing.T, ev advisory.LockEvent, rec *recorder, name, step, code string) {
	t.Helper()
	assert.Equal(t, step, ev.Reason)
	assert.Equal(t, name, ev.Name)
	assert.Equal(t, advisory.KeyOf(name), ev.Key)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, ev.Err, &pgErr)
	assert.Equal(t, code, pgErr.Code)
	assert.Positive(t, ev.Wait, "the back-off")
	logged := rec.find("advisory: lead: campaign failed, campaigning again")
	require.NotNil(t, logged)
	assert.Equal(t, slog.LevelWarn, logged["level"])
	assert.Equal(t, step, logged["step"])
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
		advisory.WithHooks(advisory.Hooks{LeadRetry: func(ev advisory.LockEvent) { offer(retries, ev) }}))
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
