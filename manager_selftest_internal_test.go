package advisory

import (
	"context"
	"log/slog"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestSelfTestSaysWhenTheSecondSessionNeverAnswers: New's self-test whose second session
// gets no answer (here a listener that accepts and never speaks, as an overloaded pooler
// seemed to be: at load 50 the second session of a test through a pool of one ran out of
// its bound before the pool-full check could conclude) is inconclusive, and New says so
// at Warn, once, for a session holding and a transaction holding alike. It used to go on
// without a word.
func TestSelfTestSaysWhenTheSecondSessionNeverAnswers(t *testing.T) {
	t.Parallel()
	m, _ := internalManager(t) // its pool's connections are set up as New's are
	mute := silentListener(t)
	cc, err := pgconn.ParseConfig("host=127.0.0.1 port=" + strconv.Itoa(mute) + " user=postgres sslmode=disable")
	require.NoError(t, err)
	for _, kind := range []Holding{HoldingSession, HoldingTransaction} {
		t.Run(kind.String(), func(t *testing.T) {
			rec := &records{}
			logger := slog.New(rec)
			conn, err := m.pool.Acquire(context.Background())
			require.NoError(t, err)
			defer conn.Release()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			require.NoError(t, checkEnforced(ctx, conn, cc, kind, logger), "inconclusive: New goes on")
			assert.Equal(t, []slog.Level{slog.LevelWarn}, rec.said("the check was skipped"), "said once, at Warn: %v", rec.msgs)
			assert.Len(t, rec.said("second connection failed"), 1, "and why: %v", rec.msgs)
		})
	}
}

// silentListener returns the port of a listener on 127.0.0.1 that accepts connections
// and never writes to them; they are closed when t ends.
func silentListener(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}
