package advisory_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// forgeInALoop opens, until ctx ends, a new session from connString every 5 ms, keeping
// the last five open, and counts in opened the sessions it opened.
func forgeInALoop(ctx context.Context, connString string, opened *atomic.Int64) {
	var open []*pgx.Conn
	defer func() {
		for _, c := range open {
			c.Close(context.Background())
		}
	}()
	for ctx.Err() == nil {
		if c, err := pgx.Connect(ctx, connString); err == nil {
			opened.Add(1)
			open = append(open, c)
			if len(open) > 5 {
				open[0].Close(context.Background())
				open = open[1:]
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// TestDrainUnderAForgersLoop (issue 46, item 3): a LOGIN-only role forges the lock's tag
// in four loops, each opening a new session in another database every 5 ms (and keeping
// its last five). A superuser's drain
// covers every role, so it counts the forger's sessions; it waits only for those there
// when it began (the only ones that can be an earlier holder's work), terminates the
// later ones without waiting for them, and ends: Do runs fn within the drain wait and a
// bound, every time, and so does Lead. (Before: the drain counted every new session as
// an earlier holder's and failed with ErrWorkNotDrained after 10 s past the wait.)
func TestDrainUnderAForgersLoop(t *testing.T) {
	t.Parallel()
	name := t.Name()
	db := forgersDatabase(t)
	forged := dsn(t, "user="+tempRole(t), "password=pw", "dbname="+db, "application_name="+forgedTag(t, name))
	ctx, stop := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	var opened atomic.Int64
	for range 4 {
		wg.Add(1)
		go func() { defer wg.Done(); forgeInALoop(ctx, forged, &opened) }()
	}
	t.Cleanup(func() { stop(); wg.Wait() })
	eventually(t, 20*time.Second, func() bool { return opened.Load() >= 8 }, "the forgers' first sessions")

	const wait = 200 * time.Millisecond
	const bound = wait + 5*time.Second // the drain fails after wait + 10 s when it cannot end
	m := newManager(t, nil, advisory.WithDrainWait(wait))
	for range 3 {
		from, ran := opened.Load(), false
		begun := time.Now()
		require.NoError(t, m.Do(ctxT(t), name, func(context.Context) error { ran = true; return nil }))
		took := time.Since(begun)
		require.True(t, ran, "fn ran")
		assert.Less(t, took, bound, "Do under the forgers' loop")
		t.Logf("Do ran fn after %v, the forgers opening %d sessions meanwhile", took, opened.Load()-from)
	}

	l, err := m.Lock(ctxT(t), name)
	require.NoError(t, err)
	report, err := l.Drain(ctxT(t))
	require.NoError(t, err, "the drain ends under the loop")
	assert.Less(t, report.Took, bound)
	require.NoError(t, l.Unlock(ctxT(t)))

	lctx, cancel := context.WithTimeout(ctxT(t), 30*time.Second)
	defer cancel()
	begun, led := time.Now(), false
	require.NoError(t, m.Lead(lctx, name, func(context.Context) error { led = true; return nil }))
	require.True(t, led, "Lead led")
	assert.Less(t, time.Since(begun), bound, "Lead under the forgers' loop")
}
