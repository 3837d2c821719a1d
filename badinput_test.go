package advisory_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

func TestInvalidNamesAreRefusedBeforeAnyIO(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	before := m.Stat().AcquireCount()
	for _, name := range []string{"", strings.Repeat("k", 1<<20), "bad\xffutf8", "nul\x00"} {
		_, err := m.Lock(ctx, name)
		require.ErrorIs(t, err, advisory.ErrInvalidKey)
		_, err = m.TryLock(ctx, name)
		require.ErrorIs(t, err, advisory.ErrInvalidKey)
		err = m.Do(ctx, name, func(context.Context) error { t.Error("fn ran"); return nil })
		require.ErrorIs(t, err, advisory.ErrInvalidKey)
	}
	assert.Equal(t, before, m.Stat().AcquireCount(), "no connection was taken for an invalid name")
}

func TestUnlockTwiceAndAfterLoss(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.ErrorIs(t, l.Unlock(ctx), advisory.ErrNotHeld)

	l, err = m.Lock(ctx, t.Name())
	require.NoError(t, err)
	terminate(t, l.PID())
	<-l.Done()
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, advisory.ErrLockLost)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr, "the server's reason stays reachable")
	assert.Equal(t, "57P01", pgErr.Code)
	require.ErrorIs(t, l.Unlock(ctx), advisory.ErrLockLost, "and stays the answer")
	requireNoAcquired(t, m)
}

func TestConcurrentUnlockReleasesOnce(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	errs := make(chan error, 8)
	for i := 0; i < cap(errs); i++ {
		go func() { errs <- l.Unlock(ctx) }()
	}
	var ok, notHeld int
	for i := 0; i < cap(errs); i++ {
		err := <-errs
		switch {
		case err == nil:
			ok++
		case errors.Is(err, advisory.ErrNotHeld):
			notHeld++
		default:
			t.Fatalf("unexpected: %v", err)
		}
	}
	require.Equal(t, 1, ok)
	require.Equal(t, cap(errs)-1, notHeld)
	requireFree(t, l.Key())
	requireNoAcquired(t, m)
}

func TestUnlockWithEndedContextStillFreesTheLock(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	l, err := m.Lock(ctxT(t), t.Name())
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err = l.Unlock(ctx)
	require.ErrorIs(t, err, context.Canceled)
	<-l.Done()
	// The connection was closed instead: the server frees the lock as the session ends.
	eventually(t, 5*time.Second, func() bool { return len(lockRows(t, l.Key())) == 0 }, "the lock is freed")
	requireNoAcquired(t, m)
}

func TestPoolExhausted(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"pool_max_conns=1"})
	ctx := ctxT(t)
	held, err := m.Lock(ctx, t.Name()+"/a")
	require.NoError(t, err)

	start := time.Now()
	_, err = m.TryLock(ctx, t.Name()+"/b")
	require.ErrorIs(t, err, advisory.ErrPoolExhausted)
	assert.Less(t, time.Since(start), time.Second, "TryLock does not wait for a connection")

	wctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = m.Lock(wctx, t.Name()+"/b")
	require.ErrorIs(t, err, advisory.ErrPoolExhausted)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "1 connections")

	require.NoError(t, held.Unlock(ctx))
	l, err := m.Lock(ctx, t.Name()+"/b")
	require.NoError(t, err, "works again once a connection is free")
	require.NoError(t, l.Unlock(ctx))
}

func TestUnreachableServer(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().(*net.TCPAddr)
	ln.Close() // nothing listens there now
	start := time.Now()
	_, err = advisory.New(ctxT(t), "host=127.0.0.1 port="+strconv.Itoa(addr.Port)+" user=nobody password=s3cret sslmode=disable")
	require.Error(t, err)
	assert.Less(t, time.Since(start), 10*time.Second)
	assert.Contains(t, err.Error(), "advisory: connect")
	assert.NotContains(t, err.Error(), "s3cret", "no password in messages")
	var ce *pgconn.ConnectError
	assert.ErrorAs(t, err, &ce)
}

// No connection string that fails to parse has its password echoed, in any form pgx's
// own redaction misses (spaces around '=', quoting, escapes).
func TestInvalidConnStringNeverShowsThePassword(t *testing.T) {
	t.Parallel()
	for _, cs := range []string{
		"postgres://u:S3cr3tPW@host:notaport/db",
		"host=127.0.0.1 password = S3cr3tPW port=abc",
		"host=127.0.0.1 password= S3cr3tPW port=abc",
		`host=127.0.0.1 password='S3cr3tPW\' port=abc`,
		`host=127.0.0.1 password='S3cr3tPW port=abc`,
		"postgres://u@host:notaport/db?password=S3cr3tPW",
	} {
		_, err := advisory.New(context.Background(), cs)
		require.ErrorIs(t, err, advisory.ErrInvalidOption, cs)
		assert.Contains(t, err.Error(), "advisory: invalid option: connection string", cs)
		assert.NotContains(t, err.Error(), "S3cr3tPW", cs)
	}
}

// A connection-string key that is no setting at all reaches the server as one (pgx
// forwards unknown keys): the error names the key and says why.
func TestUnknownConnStringKeyIsExplained(t *testing.T) {
	t.Parallel()
	_, err := advisory.New(ctxT(t), dsn(t, "no_such_setting=1"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), `the connection string's key "no_such_setting"`)
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	assert.Equal(t, "42704", pgErr.Code)
}

func TestProgrammerMisusePanics(t *testing.T) {
	t.Parallel()
	assert.Panics(t, func() { advisory.NewWithConfig(context.Background(), nil) })
	m := newManager(t, nil)
	assert.Panics(t, func() { m.Do(context.Background(), "x", nil) })
}

func TestDefaultPoolSize(t *testing.T) {
	t.Parallel()
	assert.EqualValues(t, advisory.DefaultMaxConns, newManager(t, nil).Stat().MaxConns())
	assert.EqualValues(t, 3, newManager(t, []string{"pool_max_conns=3"}).Stat().MaxConns())
	// Decided by parsing, not by a substring anywhere in the string.
	assert.EqualValues(t, advisory.DefaultMaxConns,
		newManager(t, []string{"application_name=pool_max_conns_probe"}).Stat().MaxConns())
}

// TestUnlockRacingATerminationReportsTheLoss: the session is terminated just before
// Unlock. Whether the watcher or the unlock statement sees it first, Unlock must report
// the loss (the critical section may have overlapped another holder's), never a plain
// failure, and Err must agree.
func TestUnlockRacingATerminationReportsTheLoss(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil)
	ctx := ctxT(t)
	for i := 0; i < 30; i++ {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		terminate(t, l.PID())
		err = l.Unlock(ctx)
		require.ErrorIs(t, err, advisory.ErrLockLost, "attempt %d", i)
		require.ErrorIs(t, l.Err(), advisory.ErrLockLost)
		requireNoAcquired(t, m)
	}
}

// TestTryLockRightAfterALoss: the pool is still closing the lost lock's connection when
// TryLock runs. That connection is not pinned by anyone: TryLock must get a connection,
// not report the pool exhausted. The lock itself may still be held for a moment: the
// holder is told of a termination before the dying backend has released its locks (up
// to a few hundred ms under load), so ErrLocked is a correct answer until that backend
// is gone, and only then must TryLock succeed.
func TestTryLockRightAfterALoss(t *testing.T) {
	t.Parallel()
	m := newManager(t, []string{"pool_max_conns=1"})
	ctx := ctxT(t)
	stillHeld := 0
	for i := 0; i < 20; i++ {
		l, err := m.Lock(ctx, t.Name())
		require.NoError(t, err)
		dead := l.PID()
		terminate(t, dead)
		<-l.Done()
		for {
			l, err = m.TryLock(ctx, t.Name())
			if !errors.Is(err, advisory.ErrLocked) {
				break
			}
			stillHeld++
			eventually(t, 10*time.Second, func() bool { return !holds(t, dead, advisory.KeyOf(t.Name())) },
				"attempt %d: ErrLocked, but the terminated backend %d keeps the lock", i, dead)
		}
		require.NoError(t, err, "attempt %d", i)
		require.NoError(t, l.Unlock(ctx))
	}
	t.Logf("the terminated backend still held the lock at TryLock in %d of 20 attempts", stillHeld)
}

// holds reports whether pg_locks shows pid holding key.
func holds(t testing.TB, pid uint32, key advisory.Key) bool {
	for _, r := range lockRows(t, key) {
		if r.Granted && r.PID == pid {
			return true
		}
	}
	return false
}
