package advisory_test

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestHeartbeatBehindAProxy (issue 44, item 1): behind a TCP proxy (a real HAProxy, which
// passes the server's BackendKeyData through) New finds the proxy and beats by default
// (2 s: the holder is told of a server that stopped answering within 7 s), as behind a
// session-mode PgBouncer; a direct Manager does not beat. Behind the proxy a heartbeat
// that would tell later than the minimum margin (5 s) before the server can free the
// lock (20 s) is refused, and WithHeartbeat(0) is allowed with a Warn that names what it
// gives up. Before, HAProxy was taken for a direct path: no heartbeat, Proxied false.
func TestHeartbeatBehindAProxy(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	h := pgtest.HAProxyForTest(t, srv, pgtest.HAProxyOptions{})
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolSession)
	for _, dsn := range []string{h.DSN(), b.DSN()} {
		m, err := advisory.New(ctxT(t), dsn)
		require.NoError(t, err)
		t.Cleanup(m.Close)
		bounds := m.Bounds()
		assert.True(t, bounds.Proxied, "%s", dsn)
		assert.Equal(t, 7*time.Second, bounds.HeartbeatTold, "%s: the default 2 s beat and its 5 s timeout", dsn)
	}
	direct := newManager(t, nil)
	assert.False(t, direct.Bounds().Proxied)
	assert.Zero(t, direct.Bounds().HeartbeatTold, "direct: no heartbeat by default")

	_, err := advisory.New(ctxT(t), h.DSN(), advisory.WithHeartbeat(11*time.Second)) // 11 + 5 + 5 > 20
	require.ErrorIs(t, err, advisory.ErrInvalidOption)
	require.ErrorContains(t, err, "behind a proxy")
	t.Logf("WithHeartbeat(11s): %v", err)
	m, err := advisory.New(ctxT(t), h.DSN(), advisory.WithHeartbeat(10*time.Second))
	require.NoError(t, err)
	m.Close()

	rec := &recorder{}
	m, err = advisory.New(ctxT(t), h.DSN(), advisory.WithHeartbeat(0), advisory.WithLogger(slog.New(rec)))
	require.NoError(t, err, "WithHeartbeat(0) behind a TCP proxy is the user's choice")
	t.Cleanup(m.Close)
	assert.Zero(t, m.Bounds().HeartbeatTold)
	require.True(t, rec.logged(slog.LevelWarn, "advisory: WithHeartbeat(0) behind a proxy"), "a Warn says what it gives up")
}

// logged reports whether a record at level begins with prefix.
func (r *recorder) logged(level slog.Level, prefix string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, rec := range r.records {
		if rec.Level == level && strings.HasPrefix(rec.Message, prefix) {
			return true
		}
	}
	return false
}
