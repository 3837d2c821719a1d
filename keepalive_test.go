package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

const s = time.Second

func TestDefaultBounds(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	b := m.Bounds()
	assert.Equal(t, advisory.Bounds{HolderTold: 10 * s, ServerFreesAfter: 20 * s, ServerFreesBy: 30 * s, Margin: 10 * s}, b)
}

// TestKeepaliveValidation runs without a server: New validates options before connecting.
func TestKeepaliveValidation(t *testing.T) {
	t.Parallel()
	ka := func(idle, intvl time.Duration, n int, ut time.Duration) advisory.TCPKeepalive {
		return advisory.TCPKeepalive{Idle: idle, Interval: intvl, Count: n, UserTimeout: ut}
	}
	tight := []advisory.Option{ // the fault suite's fast profile: told by 3 s, freed no sooner than 6 s
		advisory.WithClientKeepalive(ka(1*s, 1*s, 2, 0)),
		advisory.WithServerKeepalive(ka(2*s, 1*s, 6, 0)),
		advisory.WithMinMargin(2 * s),
	}
	for _, tc := range []struct {
		name string
		opts []advisory.Option
		msg  string // "" means valid
	}{
		{"defaults", nil, ""},
		{"tight test profile", tight, ""},
		{"client slower than server", []advisory.Option{
			advisory.WithClientKeepalive(ka(10*s, 5*s, 4, 0)),
			advisory.WithServerKeepalive(ka(4*s, 2*s, 3, 0))}, "margin"},
		// FACTS: server 4/1/3 vs client 2/1/3 looked safe when measured right after activity,
		// but the server's timer may already be 4 s old when the network goes silent.
		{"ordering that only holds for a fresh timer", []advisory.Option{
			advisory.WithClientKeepalive(ka(2*s, 1*s, 3, 0)),
			advisory.WithServerKeepalive(ka(4*s, 1*s, 3, 0)), advisory.WithMinMargin(s)}, "margin"},
		{"client user timeout inverts the order", []advisory.Option{
			advisory.WithClientKeepalive(ka(4*s, 2*s, 3, 25*s))}, "margin"},
		{"server user timeout inverts the order", []advisory.Option{
			advisory.WithServerKeepalive(ka(10*s, 5*s, 4, 16*s))}, "margin"},
		{"fractional idle", []advisory.Option{advisory.WithClientKeepalive(ka(1500*time.Millisecond, s, 3, 0))}, "whole seconds"},
		{"zero interval", []advisory.Option{advisory.WithServerKeepalive(ka(10*s, 0, 4, 0))}, "interval"},
		{"count 0", []advisory.Option{advisory.WithClientKeepalive(ka(s, s, 0, 0))}, "count is 0"},
		{"count 200", []advisory.Option{advisory.WithServerKeepalive(ka(s, s, 200, 0))}, "count is 200"},
		{"user timeout below idle+interval", []advisory.Option{advisory.WithClientKeepalive(ka(4*s, 2*s, 3, 5*s))}, "TCP user timeout"},
		{"margin below 1s", []advisory.Option{advisory.WithMinMargin(time.Millisecond)}, "margin"},
		{"margin larger than the settings give", []advisory.Option{advisory.WithMinMargin(11 * s)}, "margin"},
		{"check interval too small", []advisory.Option{advisory.WithConnectionCheckInterval(time.Millisecond)}, "connection check interval"},
		{"cancel grace too small", []advisory.Option{advisory.WithCancelGrace(time.Microsecond)}, "cancel grace"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// Port 1 on loopback: nothing listens; a valid config fails only at connect.
			_, err := advisory.New(context.Background(), "host=127.0.0.1 port=1 connect_timeout=1 sslmode=disable", tc.opts...)
			if tc.msg == "" {
				require.NotErrorIs(t, err, advisory.ErrInvalidOption)
				return
			}
			require.ErrorIs(t, err, advisory.ErrInvalidOption)
			assert.Contains(t, err.Error(), tc.msg)
		})
	}
}

// TestLibpqKeepaliveKeysInTheConnectionString: libpq's client keepalive keys are applied
// to the client end, not sent to the server (where keepalives_idle would fail the
// connect, and tcp_user_timeout would silently become the server's setting).
func TestLibpqKeepaliveKeysInTheConnectionString(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"keepalives=1", "keepalives_idle=2", "keepalives_interval=1",
		"keepalives_count=3", "tcp_user_timeout=5000"})
	b := m.Bounds()
	assert.Equal(t, 5*s, b.HolderTold, "client end: 2s + 1s*3, user timeout 5000ms")
	assert.Equal(t, 20*s, b.ServerFreesAfter, "server end untouched")
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err, "the connect was not broken by the keys")
	require.NoError(t, l.Unlock(ctx))

	for _, tc := range []struct {
		extra string
		opts  []advisory.Option
		msg   string
	}{
		{"keepalives=0", nil, "advisory needs TCP keepalive"},
		{"keepalives_idle=soon", nil, `keepalives_idle="soon": want a whole number from 1 to 32767 seconds`},
		// Values that overflowed into a plausible setting (4 s, 10 s) before the range check.
		{"keepalives_idle=36028797018963972", nil, `keepalives_idle="36028797018963972": want a whole number from 1 to 32767`},
		{"tcp_user_timeout=288230376151721704", nil, `tcp_user_timeout="288230376151721704": want a whole number from 0 to 86400000 milliseconds`},
		{"keepalives_interval=0", nil, `keepalives_interval="0": want a whole number from 1`},
		{"keepalives_count=128", nil, `keepalives_count="128": want a whole number from 1 to 127`},
		{"keepalives_count=-1", nil, `keepalives_count="-1"`},
		{"keepalives_idle=30", nil, "margin"}, // validated like any other setting
		{"keepalives_count=3", []advisory.Option{advisory.WithClientKeepalive(advisory.TCPKeepalive{
			Idle: 4 * s, Interval: 2 * s, Count: 3})}, "set it in one place"},
	} {
		_, err := advisory.New(context.Background(), "host=127.0.0.1 port=1 sslmode=disable "+tc.extra, tc.opts...)
		require.ErrorIs(t, err, advisory.ErrInvalidOption, tc.extra)
		assert.Contains(t, err.Error(), tc.msg, tc.extra)
	}
}
