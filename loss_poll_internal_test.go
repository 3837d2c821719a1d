//go:build linux

package advisory

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

func internalManager(t *testing.T, opts ...Option) (*Manager, *pgxpool.Pool) {
	t.Helper()
	dsn := os.Getenv(pgtest.EnvDSN)
	if dsn == "" {
		pgtest.Need(t, nil, errors.New("TestMain found no server"))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := New(ctx, dsn, opts...)
	require.NoError(t, err)
	t.Cleanup(m.Close)
	admin, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(admin.Close)
	return m, admin
}

func terminateBackend(t *testing.T, admin *pgxpool.Pool, pid uint32) {
	t.Helper()
	_, err := admin.Exec(context.Background(), "SELECT pg_terminate_backend($1)", int32(pid))
	require.NoError(t, err)
}

func requireDoneSoon(t *testing.T, l *Lock, what string) {
	t.Helper()
	select {
	case <-l.Done():
		require.ErrorIs(t, l.Err(), ErrLockLost, what)
	case <-time.After(10 * time.Second):
		t.Fatalf("%s: loss not seen within 10s", what)
	}
}

// A release that begins just as the watcher finds the connection dead must not touch the
// epoll set afterwards: the dead socket's descriptor number may already belong to another
// lock's connection, whose registration an EPOLL_CTL_DEL would silently remove.
func TestPollerNeverDeletesAReusedDescriptor(t *testing.T) {
	m, admin := internalManager(t)
	if m.poller == nil {
		t.Skip("no epoll poller")
	}
	ctx := context.Background()
	dying, err := m.Lock(ctx, t.Name()+"/dying")
	require.NoError(t, err)
	// What release does first: claim the session. Then the watcher sees it die.
	dying.s.setState(stateReleasing)
	terminateBackend(t, admin, dying.PID())
	readerExited(t, dying.s) // the reader classified the loss and closed the socket
	var next *Lock
	for attempt := 0; attempt < 5 && next == nil; attempt++ {
		l, err := m.Lock(ctx, t.Name()+"/next")
		require.NoError(t, err)
		if l.s.fd == dying.s.fd {
			next = l
		} else {
			defer l.Unlock(ctx)
		}
	}
	if next == nil {
		t.Skip("the dead socket's descriptor number was not reused: the schedule cannot be built")
	}
	require.False(t, dying.s.stopWatch(), "what release does next: it must find the session lost")

	terminateBackend(t, admin, next.PID())
	requireDoneSoon(t, next, "the lock whose socket reused the descriptor number")
}

// Lock.File: the duplicate keeps the session, and the lock, alive after the library's own
// descriptor is closed (as a killed supervisor's is), and the lock goes when it closes.
func TestLockFileKeepsTheSessionAlive(t *testing.T) {
	m, admin := internalManager(t)
	ctx := context.Background()
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	f, err := l.File()
	require.NoError(t, err)
	heldBy := func() []uint32 {
		rows, err := admin.Query(ctx, `SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
			AND classid = $1 AND objid = $2 AND objsubid = 1`, uint32(uint64(l.Key())>>32), uint32(l.Key()))
		require.NoError(t, err)
		defer rows.Close()
		var pids []uint32
		for rows.Next() {
			var p uint32
			require.NoError(t, rows.Scan(&p))
			pids = append(pids, p)
		}
		return pids
	}
	pid := l.PID()
	require.NoError(t, l.s.pg.Conn().Close()) // the library's descriptor goes, as if its process died
	// The server still has a client: its backend keeps the lock. Give it time to notice
	// a FIN, were there one: a round trip on another connection and a short sleep.
	for range 5 {
		_, err := admin.Exec(ctx, "SELECT pg_sleep(0.05)")
		require.NoError(t, err)
		require.Equal(t, []uint32{pid}, heldBy(), "held while the duplicate is open")
	}
	require.NoError(t, f.Close())
	deadline := time.Now().Add(10 * time.Second) // heldBy uses require: poll on this goroutine
	for len(heldBy()) != 0 {
		require.True(t, time.Now().Before(deadline), "freed once the last descriptor closed")
		time.Sleep(5 * time.Millisecond)
	}
	ended := &pin{err: ErrNotHeld, state: stateEnded}
	_, err = (&Lock{s: ended, on: ended}).File()
	require.ErrorIs(t, err, ErrNotHeld)
}

// readerExited waits for the reader goroutine that the pin's watcher started, once
// started, to exit.
func readerExited(t *testing.T, s *pin) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		s.mu.Lock()
		exited := s.watchDone
		s.mu.Unlock()
		if exited != nil {
			<-exited
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("no reader started within 10s")
		}
		time.Sleep(time.Millisecond)
	}
}
