package advisory

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// Where the poller cannot watch a held connection (no epoll on the platform, or
// unsolicited input handed the connection to a reader), a reader goroutine watches it,
// and it starts and stops once per call of a Session, or per BeginFunc of a Lock: every
// call must wait for that call's reader, not an earlier one, and a loss must still be
// seen after many. (A single watchDone channel for the pin's life made the second call
// run while the second reader still read the connection, then panic on a second close.)
func TestReaderWatchRestartsForEveryCall(t *testing.T) {
	m, admin := internalManager(t)
	p := m.poller
	m.poller = nil // every hold falls back to the reader goroutine
	t.Cleanup(func() { m.poller = p })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	S, err := m.Session(ctx)
	require.NoError(t, err)
	for i := range 20 {
		name := t.Name() + "/" + strconv.Itoa(i)
		require.NoError(t, S.Lock(ctx, name))
		require.NoError(t, S.Unlock(ctx, name))
	}
	l, err := m.Lock(ctx, t.Name()+"/lock")
	require.NoError(t, err)
	for range 5 {
		require.NoError(t, l.BeginFunc(ctx, func(pgx.Tx) error { return nil }))
	}
	require.NoError(t, S.Lock(ctx, t.Name()+"/held"))
	terminateBackend(t, admin, S.PID())
	select {
	case <-S.Done():
		require.ErrorIs(t, S.Err(), ErrLockLost)
	case <-time.After(10 * time.Second):
		t.Fatal("the Session's loss was not seen within 10s")
	}
	terminateBackend(t, admin, l.PID())
	requireDoneSoon(t, l, "the lock after 5 fenced transactions")
}
