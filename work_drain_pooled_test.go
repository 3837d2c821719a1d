package advisory_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// tagPrefixOf returns the part of l's work tag that every holding of its lock shares.
func tagPrefixOf(l *advisory.Lock) string {
	tag := l.WorkAppName("")
	return tag[:strings.LastIndex(tag, "/")+1]
}

// idleTagged returns the pids of the idle sessions whose application_name carries prefix.
func idleTagged(t *testing.T, prefix string) []uint32 {
	t.Helper()
	rows, err := admin.Query(ctxT(t), "SELECT pid FROM pg_stat_activity "+
		"WHERE strpos(application_name, $1) > 0 AND state = 'idle'", prefix)
	require.NoError(t, err)
	pids, err := pgx.CollectRows(rows, pgx.RowTo[uint32])
	require.NoError(t, err)
	return pids
}

// onTaggedServer opens clients of connString that set no application_name, each in a
// transaction, until one runs on a server connection whose application_name carries
// prefix (left there by an earlier client); it returns that client, in its transaction.
// The others keep their server connections until then, and then end their transactions.
func onTaggedServer(t *testing.T, connString, prefix string, tries int) *pgx.Conn {
	t.Helper()
	var others []*pgx.Conn
	defer func() {
		for _, c := range others {
			_, err := c.Exec(ctxT(t), "ROLLBACK")
			require.NoError(t, err)
		}
	}()
	for range tries {
		c, err := pgx.Connect(ctxT(t), connString)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close(context.Background()) })
		require.Empty(t, c.PgConn().ParameterStatus("application_name"), "a bystander sets no application_name")
		_, err = c.Exec(ctxT(t), "BEGIN")
		require.NoError(t, err)
		var app string
		require.NoError(t, c.QueryRow(ctxT(t), "SELECT current_setting('application_name')").Scan(&app))
		if strings.Contains(app, prefix) {
			return c
		}
		others = append(others, c)
	}
	t.Fatalf("no server connection of the pooler carries %q", prefix)
	return nil
}

// pooledSlowWork starts on c (through a transaction pooler) a transaction that writes
// marker and sleeps for a minute; it returns the backend's pid, found by the tag (a
// pooled client's statements may run on any server connection).
func pooledSlowWork(t *testing.T, c *pgx.Conn, tag, marker string) uint32 {
	t.Helper()
	marksOnce.Do(func() {
		_, marksErr = admin.Exec(ctxT(t), "CREATE TABLE IF NOT EXISTS work_marks (marker text)")
	})
	require.NoError(t, marksErr)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		c.Exec(context.Background(), "BEGIN; INSERT INTO work_marks VALUES ($$"+marker+"$$); SELECT pg_sleep(60); COMMIT")
	}()
	var pid uint32
	eventually(t, 10*time.Second, func() bool {
		err := admin.QueryRow(ctxT(t), "SELECT pid FROM pg_stat_activity WHERE wait_event = 'PgSleep' "+
			"AND strpos(application_name, $1) > 0", tag).Scan(&pid)
		return err == nil
	}, "the work in its sleep")
	t.Cleanup(func() {
		admin.Exec(context.Background(), "SELECT pg_terminate_backend($1)", int32(pid))
		<-finished
	})
	return pid
}

// afterListing waits until the drain in the transaction holding of backend pid has
// finished its first look at the sessions: it has begun its next one, which starts with
// pg_stat_clear_snapshot (see freshStats).
func afterListing(t *testing.T, pid uint32) {
	t.Helper()
	var listed time.Time
	eventually(t, 10*time.Second, func() bool {
		var q string
		var qs, xs time.Time
		err := admin.QueryRow(ctxT(t), "SELECT query, query_start, xact_start FROM pg_stat_activity WHERE pid = $1",
			int32(pid)).Scan(&q, &qs, &xs)
		switch {
		case err != nil || !qs.After(xs):
		case listed.IsZero() && strings.Contains(q, "pg_catalog.statement_timestamp()"):
			listed = qs
		case !listed.IsZero() && strings.Contains(q, "pg_stat_clear_snapshot") && qs.After(listed):
			return true
		}
		return false
	}, "the drain's first look done")
}

// TestTransactionPoolerDrainSparesBystanders (issue 43, item 5): everything through one
// PgBouncer in transaction mode (pool of 6). Work connected with WorkConnString leaves
// its tag as application_name on the pooler's server connections (PgBouncer sets it for
// each client it links, and never undoes it). Later holders' drains leave those server
// connections alone, idle or running a bystander's transaction: no drain wait, no
// termination. An earlier holder's work still running through the pooler is drained.
// (Before: the drain waited its whole wait for the idle server connection and
// terminated it, and a bystander's transaction there with it: FATAL 57P01.)
func TestTransactionPoolerDrainSparesBystanders(t *testing.T) {
	const poolSize = 6
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(poolSize))
	ctx, name := ctxT(t), t.Name()
	pooled := b.DSN() + " default_query_exec_mode=simple_protocol"
	const wait = 5 * time.Second
	first, second := pooledManager(t, b), pooledManager(t, b, advisory.WithDrainWait(wait))

	var prefix string
	require.NoError(t, first.Do(ctx, name, func(ctx context.Context) error {
		l := advisory.LockFromContext(ctx)
		prefix = tagPrefixOf(l)
		work, err := l.WorkConnString(pooled)
		require.NoError(t, err)
		var conns []*pgx.Conn
		for range poolSize - 1 { // transactions at once: every server connection but the holding's gets the tag
			c, err := pgx.Connect(ctx, work)
			require.NoError(t, err)
			defer c.Close(context.Background())
			_, err = c.Exec(ctx, "BEGIN")
			require.NoError(t, err)
			conns = append(conns, c)
		}
		for _, c := range conns {
			if _, err := c.Exec(ctx, "COMMIT"); err != nil {
				return err
			}
		}
		return nil
	}))
	stale := idleTagged(t, prefix)
	require.NotEmpty(t, stale, "the work's tag stays on the pooler's server connections")

	begun := time.Now()
	require.NoError(t, second.Do(ctx, name, func(context.Context) error { return nil }))
	took := time.Since(begun)
	assert.Less(t, took, wait/2, "the next Do paid the drain wait")
	t.Logf("the next Do took %v beside %d server connections with a stale tag", took, len(stale))
	for _, pid := range stale {
		require.False(t, backendGone(t, pid), "server connection %d terminated", pid)
	}

	// An earlier holder's work still runs through the pooler when its lock is lost; the
	// next holder's drain waits for it and terminates it. A bystander whose transaction
	// begins on a server connection with a stale tag while the drain waits is left alone.
	l, err := first.Lock(ctx, name)
	require.NoError(t, err)
	workPID := pooledSlowWork(t, workConn(t, l, pooled), l.WorkAppName(""), name)
	terminate(t, l.PID())
	<-l.Done()
	third := pooledManager(t, b, advisory.WithDrainWait(time.Second))
	l, err = third.Lock(ctx, name)
	require.NoError(t, err)
	type result struct {
		report advisory.DrainReport
		err    error
	}
	drained := make(chan result, 1)
	go func() { r, err := l.Drain(ctx); drained <- result{r, err} }()
	afterListing(t, l.PID())
	bystander := onTaggedServer(t, pooled, prefix, poolSize-2) // all but the work's and the holding's
	r := <-drained
	require.NoError(t, r.err)
	require.Len(t, r.report.Sessions, 1, "only the earlier holder's work: %+v", r.report.Sessions)
	assert.Equal(t, workPID, r.report.Sessions[0].PID)
	assert.True(t, r.report.Sessions[0].Terminated)
	require.True(t, backendGone(t, workPID), "the earlier holder's work through the pooler is gone")
	_, err = bystander.Exec(ctx, "SELECT 1")
	require.NoError(t, err, "the bystander's transaction lives on")
	_, err = bystander.Exec(ctx, "COMMIT")
	require.NoError(t, err)
	require.NoError(t, l.Unlock(ctx))
	require.False(t, markerCommitted(t, name))
}
