package advisory

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
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
			var out lockedBuffer
			logger := slog.New(slog.NewTextHandler(&out, nil))
			conn, err := m.pool.Acquire(context.Background())
			require.NoError(t, err)
			defer conn.Release()
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
			defer cancel()
			require.NoError(t, checkEnforced(ctx, conn, cc, kind, logger), "inconclusive: New goes on")
			said := out.String()
			assert.Equal(t, 1, strings.Count(said, "the check was skipped"), "said once, at Warn:\n%s", said)
			assert.Contains(t, said, "level=WARN")
			assert.Contains(t, said, "second connection failed")
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

// lockedBuffer is a bytes.Buffer that a logger may write from any goroutine.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
