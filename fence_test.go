package advisory_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// fenceManagers returns n Managers sharing a fencing table of t's own, created.
func fenceManagers(t *testing.T, n int) []*advisory.Manager {
	t.Helper()
	return fenceManagersWith(t, n, nil)
}

// fenceManagersWith is fenceManagers with extra options for each Manager: opts(i) for
// the i-th (nil: none).
func fenceManagersWith(t *testing.T, n int, opts func(i int) []advisory.Option) []*advisory.Manager {
	t.Helper()
	dsn(t) // skips without a server, before the cleanup that needs one
	table := "fence_tokens_" + advisory.KeyOf(t.Name()).String()
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()) })
	ms := make([]*advisory.Manager, n)
	for i := range ms {
		var extra []advisory.Option
		if opts != nil {
			extra = opts(i)
		}
		ms[i] = newManager(t, nil, append(extra, advisory.WithFenceTable(table))...)
	}
	require.NoError(t, ms[0].CreateFenceTable(ctxT(t)))
	require.NoError(t, ms[0].CreateFenceTable(ctxT(t)), "idempotent")
	return ms
}

// TestTokensIncreaseAcrossHolders: every holding's token is greater than all earlier
// ones, whichever Manager held the lock; a second Token call returns the same token.
func TestTokensIncreaseAcrossHolders(t *testing.T) {
	t.Parallel()
	ms := fenceManagers(t, 3)
	ctx := ctxT(t)
	last := int64(0)
	for i := 0; i < 12; i++ {
		l, err := ms[i%3].Lock(ctx, t.Name())
		require.NoError(t, err)
		tok, err := l.Token(ctx)
		require.NoError(t, err)
		require.Greater(t, tok, last, "holding %d", i)
		again, err := l.Token(ctx)
		require.NoError(t, err)
		require.Equal(t, tok, again, "cached")
		requireHeldBy(t, l.Key(), l.PID())
		hs, err := ms[0].Holders(ctx, t.Name())
		require.NoError(t, err)
		require.Len(t, hs, 1)
		require.Equal(t, t.Name(), hs[0].Name, "Holders still reads the name after the token's statement")
		require.NoError(t, l.Unlock(ctx))
		last = tok
	}
	for _, m := range ms {
		requireNoAcquired(t, m)
	}
}

// TestTokenWithoutTable: a clear error, and the lock is kept.
func TestTokenWithoutTable(t *testing.T) {
	t.Parallel()
	m := newManager(t, nil, advisory.WithFenceTable("no_such_fence_table"))
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	_, err = l.Token(ctx)
	require.ErrorIs(t, err, advisory.ErrNoFenceTable)
	require.Contains(t, err.Error(), "no_such_fence_table")
	require.NoError(t, l.Err())
	requireHeldBy(t, l.Key(), l.PID())
	require.NoError(t, l.Unlock(ctx))
	_, err = l.Token(ctx)
	require.ErrorIs(t, err, advisory.ErrNotHeld)
}

// TestTokenCancelKeepsTheLock: a Token call whose ctx ends while its statement waits
// (the key's row is locked by another transaction) takes no token and keeps the lock.
func TestTokenCancelKeepsTheLock(t *testing.T) {
	t.Parallel()
	ms := fenceManagers(t, 1)
	m := ms[0]
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	first, err := l.Token(ctx)
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))

	l, err = m.Lock(ctx, t.Name())
	require.NoError(t, err)
	blocker, err := admin.Begin(ctx)
	require.NoError(t, err)
	defer blocker.Rollback(ctx)
	require.NoError(t, m.CheckToken(ctx, blocker, t.Name(), first)) // FOR SHARE on the row
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = l.Token(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, l.Err())
	requireHeldBy(t, l.Key(), l.PID())
	require.NoError(t, blocker.Rollback(ctx))
	tok, err := l.Token(ctx)
	require.NoError(t, err)
	require.Equal(t, first+1, tok, "the cancelled call took no token")
	require.NoError(t, l.Unlock(ctx))
	requireNoAcquired(t, m)
}

// TestCheckTokenRefusesStaleWriters: a writer on another connection with the old
// holder's token is refused once a newer holder took a token; the newer holder's token
// waits for a writer that checked first to commit.
func TestCheckTokenRefusesStaleWriters(t *testing.T) {
	t.Parallel()
	ms := fenceManagers(t, 2)
	ctx := ctxT(t)
	a, err := ms[0].Lock(ctx, t.Name())
	require.NoError(t, err)
	tokA, err := a.Token(ctx)
	require.NoError(t, err)

	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		writer, err := admin.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		require.NoError(t, err)
		require.NoError(t, ms[1].CheckToken(ctx, writer, t.Name(), tokA), "current token accepted (%s)", iso)
		require.NoError(t, writer.Commit(ctx))
	}
	// A writer that checked first holds back the newer holder's token until it commits.
	writer, err := admin.Begin(ctx)
	require.NoError(t, err)
	require.NoError(t, ms[1].CheckToken(ctx, writer, t.Name(), tokA))
	require.NoError(t, a.Unlock(ctx))
	b, err := ms[1].Lock(ctx, t.Name())
	require.NoError(t, err)
	got := make(chan int64, 1)
	go func() { tok, _ := b.Token(ctx); got <- tok }()
	eventually(t, 10*time.Second, func() bool {
		var waiting bool
		require.NoError(t, admin.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_locks WHERE pid = $1 AND NOT granted)",
			int32(b.PID())).Scan(&waiting))
		return waiting
	}, "the newer holder's Token waits for the writer's row lock")
	select {
	case <-got:
		t.Fatal("a newer token was taken while a writer with the older one had checked and not committed")
	default:
	}
	require.NoError(t, writer.Commit(ctx))
	tokB := <-got
	require.Greater(t, tokB, tokA)

	for _, iso := range []pgx.TxIsoLevel{pgx.ReadCommitted, pgx.RepeatableRead, pgx.Serializable} {
		stale, err := admin.BeginTx(ctx, pgx.TxOptions{IsoLevel: iso})
		require.NoError(t, err)
		require.ErrorIs(t, ms[0].CheckToken(ctx, stale, t.Name(), tokA), advisory.ErrStaleToken, "%s", iso)
		require.NoError(t, stale.Rollback(ctx))
	}
	unknown, err := admin.Begin(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, ms[0].CheckToken(ctx, unknown, t.Name()+"/never", 1), advisory.ErrStaleToken)
	require.NoError(t, unknown.Rollback(ctx))
	require.NoError(t, b.Unlock(ctx))
}

// TestTokenAfterTheLockEnded: once a token was taken, Token still fails after Unlock
// (ErrNotHeld) and after a loss (ErrLockLost), as documented: a cached token is not handed
// out by a Lock that no longer holds its key.
func TestTokenAfterTheLockEnded(t *testing.T) {
	t.Parallel()
	ms := fenceManagers(t, 1)
	m := ms[0]
	ctx := ctxT(t)
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	first, err := l.Token(ctx)
	require.NoError(t, err)
	again, err := l.Token(ctx)
	require.NoError(t, err)
	require.Equal(t, first, again, "a second call returns the cached token")
	require.NoError(t, l.Unlock(ctx))
	_, err = l.Token(ctx)
	require.ErrorIs(t, err, advisory.ErrNotHeld, "Token after Unlock")

	l, err = m.Lock(ctx, t.Name())
	require.NoError(t, err)
	_, err = l.Token(ctx)
	require.NoError(t, err)
	terminate(t, l.PID())
	select {
	case <-l.Done():
	case <-ctx.Done():
		t.Fatal("Done not closed after the backend was terminated")
	}
	_, err = l.Token(ctx)
	require.ErrorIs(t, err, advisory.ErrLockLost, "Token after a loss")
	require.ErrorIs(t, l.Unlock(ctx), advisory.ErrLockLost)
	requireNoAcquired(t, m)
}
