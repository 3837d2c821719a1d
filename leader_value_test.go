package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestPublishedValueBelongsToItsHolding (issue 37, item 4): a value a holding published is
// shown for that holding only, never for a later holding of the same key on the same
// server session: after the session went back to the pool and took the lock again (a
// plain Lock, a Do after LeadAs stepped down), or after an in-process handoff. Rows were
// matched on the session (pid, backend_start), which names a session, not a holding.
func TestPublishedValueBelongsToItsHolding(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	follower := leaderManager(t, "follower")
	for _, next := range []struct {
		name string
		take func(m *advisory.Manager, name string) (*advisory.Lock, func())
	}{
		{"Lock on the same session", func(m *advisory.Manager, name string) (*advisory.Lock, func()) {
			l, err := m.Lock(ctx, name)
			require.NoError(t, err)
			return l, func() { require.NoError(t, l.Unlock(ctx)) }
		}},
		{"Do after LeadAs", func(m *advisory.Manager, name string) (*advisory.Lock, func()) {
			got, release := make(chan *advisory.Lock), make(chan struct{})
			go m.Do(ctx, name, func(ctx context.Context) error {
				got <- advisory.LockFromContext(ctx)
				<-release
				return nil
			})
			return <-got, func() { close(release) }
		}},
	} {
		t.Run(next.name, func(t *testing.T) {
			name := t.Name()
			m := newManager(t, []string{"pool_max_conns=1"}, advisory.WithLeaderTable())
			stop := make(chan struct{})
			done := leadUntil(ctx, m, name, "stale", stop)
			eventually(t, 10*time.Second, func() bool {
				ld, err := follower.Leader(ctx, name)
				require.NoError(t, err)
				return ld.Value == "stale"
			}, "the leader's value")
			close(stop)
			require.NoError(t, <-done)
			l, end := next.take(m, name)
			ld, err := follower.Leader(ctx, name)
			require.NoError(t, err)
			require.True(t, ld.Elected)
			require.Equal(t, l.PID(), ld.Holder.PID, "the same server session holds it again")
			assert.Empty(t, ld.Value, "a later holding on the same session shows the earlier one's value")
			end()
		})
	}
	t.Run("handoff", func(t *testing.T) {
		name := t.Name()
		m := newManager(t, nil, advisory.WithLeaderTable(), advisory.WithLocalHandoff(8, time.Minute))
		l, err := m.Lock(ctx, name)
		require.NoError(t, err)
		require.NoError(t, l.Publish(ctx, "stale"))
		next := make(chan *advisory.Lock, 1)
		go func() { n, _ := m.Lock(ctx, name); next <- n }()
		queued(t, m, l.Key(), 1)
		require.NoError(t, l.Unlock(ctx))
		n := <-next
		require.NotNil(t, n)
		ld, err := follower.Leader(ctx, name)
		require.NoError(t, err)
		require.True(t, ld.Elected)
		assert.Empty(t, ld.Value, "the next holding shows the earlier one's value")
		require.NoError(t, n.Unlock(ctx))
	})
}

// TestHoldersSinceAcrossAHandoff (issue 37, item 7): Holder.Since of a lock passed
// between Lock calls of one Manager (WithLocalHandoff) is when the server granted the
// lock to the session, the start of the run of handoffs, whichever holding of the run
// ran the session's last statement: the server sees one holding, and every holding of
// the run records the same grant time. It used to be the grant time of whichever holding
// had run a statement last.
func TestHoldersSinceAcrossAHandoff(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	fence := fenceManagersWith(t, 1, func(int) []advisory.Option {
		return []advisory.Option{advisory.WithLocalHandoff(8, time.Minute)}
	})
	m := fence[0]
	name := t.Name()
	first, err := m.Lock(ctx, name)
	require.NoError(t, err)
	_, err = first.Token(ctx) // a statement of the first holding: the comment records its grant
	require.NoError(t, err)
	since := holderSince(t, m, name)
	next := make(chan *advisory.Lock, 1)
	go func() { n, _ := m.Lock(ctx, name); next <- n }()
	queued(t, m, first.Key(), 1)
	time.Sleep(20 * time.Millisecond) // the second holding begins well after the first
	require.NoError(t, first.Unlock(ctx))
	second := <-next
	require.NotNil(t, second)
	assert.Equal(t, since, holderSince(t, m, name), "right after the handoff")
	_, err = second.Token(ctx) // a statement of the second holding
	require.NoError(t, err)
	assert.Equal(t, since, holderSince(t, m, name), "after the second holding's own statement")
	require.NoError(t, second.Unlock(ctx))
}

// holderSince returns Holder.Since of name's one holder.
func holderSince(t *testing.T, m *advisory.Manager, name string) time.Time {
	t.Helper()
	hs, err := m.Holders(ctxT(t), name)
	require.NoError(t, err)
	require.Len(t, hs, 1)
	return hs[0].Since
}
