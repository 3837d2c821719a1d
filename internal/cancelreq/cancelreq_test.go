package cancelreq_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgconn/ctxwatch"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/cancelreq"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

var (
	srv      *pgtest.Server
	startErr error
)

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	srv, startErr = pgtest.Start(context.Background())
	if startErr != nil {
		if pgtest.InCI() {
			fmt.Fprintf(os.Stderr, "FAIL: CI=true and no PostgreSQL for the tests: %v\n", startErr)
			return 1
		}
		return m.Run() // database tests skip with the reason
	}
	defer srv.Close()
	return m.Run()
}

// connect opens a connection whose ctxwatch.Handler is a cancelreq.Handler with the given
// grace, closed when the test ends.
func connect(t *testing.T, grace time.Duration) (*pgconn.PgConn, *cancelreq.Handler) {
	t.Helper()
	pgtest.Need(t, srv, startErr)
	cfg, err := pgconn.ParseConfig(srv.DSN())
	require.NoError(t, err)
	var h *cancelreq.Handler
	cfg.BuildContextWatcherHandler = func(pg *pgconn.PgConn) ctxwatch.Handler {
		h = cancelreq.New(pg, grace)
		return h
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pg, err := pgconn.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() { pg.Close(context.Background()) })
	return pg, h
}

// sleep runs pg_sleep(10) under ctx and returns its error and how long it took.
func sleep(ctx context.Context, pg *pgconn.PgConn) (time.Duration, error) {
	start := time.Now()
	_, err := pg.Exec(ctx, "SELECT pg_sleep(10)").ReadAll()
	return time.Since(start), err
}

func requireQueryCanceled(t *testing.T, err error) {
	t.Helper()
	var pgErr *pgconn.PgError
	require.True(t, errors.As(err, &pgErr), "a server error, not %v", err)
	require.Equal(t, "57014", pgErr.Code)
}

// requireUsable runs a statement on pg that lasts longer than the grace of the tests that
// call it (300 ms): no fallback deadline was left behind.
func requireUsable(t *testing.T, pg *pgconn.PgConn) {
	t.Helper()
	_, err := pg.Exec(context.Background(), "SELECT pg_sleep(0.5)").ReadAll()
	require.NoError(t, err)
}

// An unmarked statement gets pgx's default: a socket deadline, the connection broken.
func TestUnmarkedStatementBreaksTheConnection(t *testing.T) {
	pg, h := connect(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	took, err := sleep(ctx, pg)
	require.Error(t, err)
	assert.Less(t, took, 2*time.Second)
	require.True(t, pg.IsClosed())
	require.False(t, h.Settle(), "no CancelRequest was sent")
}

// A statement marked with SetWaiting, or run while SetGentle is on, is cancelled by the
// server (57014) promptly, the connection stays usable, and Settle reports the cancel
// once.
func TestMarkedStatementIsCancelledAndTheConnectionKept(t *testing.T) {
	for _, mark := range []string{"waiting", "gentle"} {
		t.Run(mark, func(t *testing.T) {
			pg, h := connect(t, 300*time.Millisecond)
			set := h.SetWaiting
			if mark == "gentle" {
				set = h.SetGentle
			}
			set(true)
			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			defer cancel()
			took, err := sleep(ctx, pg)
			set(false)
			requireQueryCanceled(t, err)
			assert.Less(t, took, 2*time.Second)
			require.True(t, h.Settle(), "a CancelRequest was sent")
			require.False(t, h.Settle(), "reported once")
			requireUsable(t, pg)
		})
	}
}

// Interrupt stops a statement whatever its ctx, from another goroutine, and may be
// called more than once.
func TestInterruptStopsAStatementWithNoDeadline(t *testing.T) {
	pg, h := connect(t, 300*time.Millisecond)
	time.AfterFunc(50*time.Millisecond, func() { h.Interrupt(); h.Interrupt() })
	took, err := sleep(context.Background(), pg)
	requireQueryCanceled(t, err)
	assert.Less(t, took, 2*time.Second)
	require.True(t, h.Settle())
	requireUsable(t, pg)
}
