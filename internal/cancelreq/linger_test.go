package cancelreq_test

import (
	"context"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/cancelreq"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestCancelsNeverAbandonedThroughPgBouncer: callers of pgx's CancelRequest whose ctx ends
// before PgBouncer has forwarded the cancel (a 1 ms bound, as a loaded machine makes any
// bound) close the cancel connection early: without Cancels, PgBouncer 1.18 exits ("bad
// client state: 0", pgbouncer issue 801). Through Cancels.Dial the connection stays open
// until PgBouncer closes it, and PgBouncer survives every cancel.
func TestCancelsNeverAbandonedThroughPgBouncer(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	for _, tc := range []struct {
		name string
		opts []pgtest.PgBouncerOption
		dsn  string
	}{
		{"in the clear", nil, ""},
		// Under TLS the CancelRequest is encrypted: its connection is told by never having
		// been marked (MarkMain) as one of the protocol.
		{"under TLS", []pgtest.PgBouncerOption{pgtest.WithClientTLS()}, " sslmode=require"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel() // each with a PgBouncer of its own
			b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, tc.opts...)
			pid := b.PID()
			var cancels cancelreq.Cancels
			cfg, err := pgconn.ParseConfig(b.DSN() + tc.dsn)
			require.NoError(t, err)
			cfg.DialFunc = cancels.Dial((&net.Dialer{}).DialContext)
			cfg.AfterNetConnect = func(_ context.Context, _ *pgconn.Config, conn net.Conn) (net.Conn, error) {
				cancels.MarkMain(conn)
				return conn, nil
			}
			const workers, rounds = 4, 50
			var wg sync.WaitGroup
			for range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					cancelWhileSleeping(t, cfg, rounds)
				}()
			}
			wg.Wait()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			require.NoError(t, cancels.Wait(ctx), "every cancel answered")
			assert.Zero(t, cancels.Open())
			requirePgBouncerAlive(t, b, pid)
		})
	}
}

// cancelWhileSleeping runs pg_sleep through one connection rounds times, each interrupted
// by a CancelRequest bounded by 1 ms.
func cancelWhileSleeping(t *testing.T, cfg *pgconn.Config, rounds int) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	pg, err := pgconn.ConnectConfig(ctx, cfg)
	if !assert.NoError(t, err) {
		return
	}
	defer pg.Close(ctx)
	for range rounds {
		stop := time.AfterFunc(5*time.Millisecond, func() {
			cctx, ccancel := context.WithTimeout(context.Background(), time.Millisecond)
			defer ccancel()
			pg.CancelRequest(cctx)
		})
		_, err := pg.Exec(ctx, "SELECT pg_sleep(0.05)").ReadAll()
		stop.Stop()
		if err != nil && !strings.Contains(err.Error(), "57014") {
			assert.NoError(t, err)
			return
		}
	}
}

// requirePgBouncerAlive fails the test if b is not the process pid any more, or logged
// the crash of an abandoned cancel request.
func requirePgBouncerAlive(t *testing.T, b *pgtest.PgBouncer, pid int) {
	t.Helper()
	log := b.Log()
	if lines := strings.Split(strings.TrimSpace(log), "\n"); len(lines) > 12 {
		log = strings.Join(lines[len(lines)-12:], "\n") // the end tells the crash
	}
	require.False(t, strings.Contains(b.Log(), "bad client state"), "PgBouncer crashed on a cancel request:\n%s", log)
	require.Equal(t, pid, b.PID(), "PgBouncer still runs, the same process; the end of its log:\n%s", log)
}
