package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestFailoverTellsEveryHolderAndLocksOnTheNewPrimary: a real primary with a real
// streaming standby (pg_basebackup -R). A Manager connects with a multi-host connection
// string (primary first, standby second, target_session_attrs=read-write) and holds locks
// of every kind. The primary is stopped (fast shutdown, as a failover manager does) and
// the standby promoted. Every holder must be told (ErrLockLost), none may stay "held",
// and the same Manager must then take locks on the new primary. A Manager pointed at the
// standby before the promotion is refused with ErrStandby.
func TestFailoverTellsEveryHolderAndLocksOnTheNewPrimary(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the failover test starts two servers")
	}
	serversLane.join(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, standby := primaryWithStandby(t, ctx)

	_, err := advisory.New(ctx, standby.DSN())
	require.ErrorIs(t, err, advisory.ErrStandby, "New on the standby before the promotion")

	both := multiHost(t, primary.DSN(), standby.DSN())
	m, err := advisory.New(ctx, both)
	require.NoError(t, err)
	defer m.Close()
	var held []*advisory.Lock
	for i := range 3 {
		l, err := m.Lock(ctx, fmt.Sprintf("%s/%d", t.Name(), i))
		require.NoError(t, err)
		held = append(held, l)
	}
	shared, err := m.LockShared(ctx, t.Name()+"/shared")
	require.NoError(t, err)
	held = append(held, shared)
	s, err := m.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, s.LockAll(ctx, []string{t.Name() + "/s1", t.Name() + "/s2"}))
	require.Equal(t, []uint32{held[0].PID()}, holdersAt(t, primary.DSN(), held[0].Key()), "the Manager is on the primary")

	stopped := time.Now()
	require.NoError(t, primary.Close()) // fast shutdown: every session is terminated
	stopTook := time.Since(stopped)
	for _, l := range held {
		select {
		case <-l.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: not told within 10s of the primary's shutdown", l.Name())
		}
		require.ErrorIs(t, l.Err(), advisory.ErrLockLost, l.Name())
		require.ErrorIs(t, l.Unlock(ctx), advisory.ErrLockLost)
	}
	select {
	case <-s.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the Session was not told within 10s of the primary's shutdown")
	}
	require.ErrorIs(t, s.Err(), advisory.ErrLockLost)
	allTold := time.Since(stopped)

	promoted := time.Now()
	require.NoError(t, standby.Promote(ctx))
	promoteTook := time.Since(promoted)

	// The same Manager locks on the new primary: new connections skip the dead host.
	l, err := m.Lock(ctx, t.Name()+"/0")
	require.NoError(t, err, "Lock after the promotion")
	assert.Equal(t, []uint32{l.PID()}, holdersAt(t, standby.DSN(), l.Key()), "held on the new primary")
	require.NoError(t, l.Unlock(ctx))
	require.Empty(t, holdersAt(t, standby.DSN(), l.Key()))
	t.Logf("primary shutdown took %v; every holder told %v after it began; promotion took %v",
		stopTook.Round(time.Millisecond), allTold.Round(time.Millisecond), promoteTook.Round(time.Millisecond))
}

// standbyServer is the standby's Server, or nil, for pgtest.Need.
// primaryWithStandby starts a throwaway primary and a real streaming standby of it
// (pg_basebackup -R), both stopped when the test ends; the test is skipped (failed under
// CI=true) where they cannot be had.
func primaryWithStandby(t *testing.T, ctx context.Context) (*pgtest.Server, *pgtest.Standby) {
	t.Helper()
	primary, err := pgtest.StartLocal(ctx, pgtest.Options{})
	pgtest.Need(t, primary, err)
	t.Cleanup(func() { primary.Close() })
	standby, err := pgtest.StartStandby(ctx, primary)
	pgtest.Need(t, standbyServer(standby), err)
	t.Cleanup(func() { standby.Close() })
	return primary, standby
}

func standbyServer(s *pgtest.Standby) *pgtest.Server {
	if s == nil {
		return nil
	}
	return s.Server()
}

// multiHost joins two single-host keyword/value DSNs of the harness into one multi-host
// DSN that connects to whichever accepts writes.
func multiHost(t *testing.T, first, second string) string {
	a, b := parse(t, first), parse(t, second)
	return fmt.Sprintf("host=%s,%s port=%d,%d user=%s dbname=%s sslmode=disable target_session_attrs=read-write",
		a.Host, b.Host, a.Port, b.Port, a.User, a.Database)
}

func parse(t *testing.T, dsn string) *pgconn.Config {
	cfg, err := pgconn.ParseConfig(dsn)
	require.NoError(t, err)
	return cfg
}

// holdersAt returns the pids that hold key on the server at dsn (see pgtest.Holders).
func holdersAt(t testing.TB, dsn string, key advisory.Key) []uint32 {
	t.Helper()
	pids, err := pgtest.Holders(context.Background(), dsn, int64(key))
	require.NoError(t, err)
	return pids
}
