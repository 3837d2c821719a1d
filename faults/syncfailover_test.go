package faults_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// syncRounds is how many failovers TestTokensSurviveSynchronousFailover makes.
const syncRounds = 3

// TestTokensSurviveSynchronousFailover: a real primary with a real synchronous standby
// (synchronous_commit=on, synchronous_standby_names naming it), reached through a
// multi-host DSN with target_session_attrs=read-write. Holders take the lock and its
// token throughout. In each round the standby is stopped, so every commit waits for it;
// then a Token with a 300 ms ctx, a BeginFunc and a DoTx whose COMMIT waits are cancelled
// (ctx, pg_cancel_backend): PostgreSQL reports such commits as done, with a WARNING, while
// only the primary has them. Each must fail with ErrCommitUnconfirmed. The primary then
// crashes (immediate shutdown), the standby, which never received those commits, comes
// back and is promoted, and the old primary is rebuilt as the new synchronous standby.
//
// Asserted: no token is handed out twice; every token returned after a failover exceeds
// every token returned before it; a stale holder's plain transaction with CheckToken of a
// token from before the failover, plus an insert, never commits on the new primary.
func TestTokensSurviveSynchronousFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: the synchronous failover test starts two servers and fails over 3 times")
	}
	serversLane.join(t)
	began := time.Now()
	ctx := ctxT(t, 3*time.Minute)
	pair := pgtest.SyncPairForTest(t)
	paired := time.Since(began)
	both := multiHost(t, pair.DSN(0), pair.DSN(1))
	m, err := advisory.New(ctx, both, advisory.WithFenceTable("sync_failover_tokens"))
	require.NoError(t, err)
	defer m.Close()
	require.NoError(t, m.CreateFenceTable(ctx))
	require.NoError(t, execOn(ctx, both, `CREATE TABLE sync_failover_writes (round int, token bigint);
		CREATE TABLE sync_failover_tx (round int, via text)`))

	b := &book{}
	workCtx, stopWork := context.WithCancel(ctx)
	var workers sync.WaitGroup
	for i := range 3 {
		workers.Add(1)
		go func() { defer workers.Done(); b.work(workCtx, m, t.Name(), fmt.Sprintf("w%d", i)) }()
	}
	defer func() { stopWork(); workers.Wait() }()
	t.Logf("set-up: pair started in %v, ready in %v", paired.Round(time.Millisecond), time.Since(began).Round(time.Millisecond))
	for r := range syncRounds {
		if !syncRound(ctx, t, pair, m, both, b, r) {
			break
		}
	}
	stopWork()
	workers.Wait()
	b.check(t)
	b.logEpochs(t)
	t.Logf("%d rounds in %v", syncRounds, time.Since(began).Round(time.Millisecond))
}

// syncRound runs one round in epoch r (the primary's timeline is r+1) and fails over to
// epoch r+1. It reports false if the round could not go on.
func syncRound(ctx context.Context, t *testing.T, pair *pgtest.SyncPair, m *advisory.Manager,
	both string, b *book, r int) bool {
	t.Helper()
	lap := newLaps()
	if !assert.NoError(t, b.awaitToken(ctx, r), "round %d: no worker took a token with the standby up", r) {
		return false
	}
	txLock, err := lockIn(ctx, m, t.Name()+"/tx", r)
	require.NoError(t, err, "round %d", r)
	lap.mark("tokens")
	pair.StopStandby()
	down := time.Now()
	lap.mark("standby stopped")
	if !assert.NoError(t, b.awaitCall(ctx, r, down), "round %d: with the standby down", r) {
		return false
	}
	lap.mark("a worker's call")
	short, err := lockIn(ctx, m, t.Name(), r)
	require.NoError(t, err, "round %d", r)
	lap.mark("lock")
	tctx, cancel := context.WithTimeout(ctx, 300*time.Millisecond)
	start := time.Now()
	tok, err := short.Token(tctx)
	cancel()
	b.add(sample{who: "short", epoch: r, tok: tok, err: err, start: start, took: time.Since(start)})
	assert.ErrorIs(t, err, advisory.ErrCommitUnconfirmed,
		"round %d: a Token whose commit the standby never confirmed returned %d", r, tok)
	assert.Zero(t, tok, "round %d: a failed Token returns no token", r)
	require.NoError(t, short.Unlock(ctx), "round %d", r) // the workers go on meanwhile

	primary := pair.PrimaryDSN()
	beginTook, beginErr := cancelledCommit(ctx, primary, func(pid chan<- uint32) error {
		return txLock.BeginFunc(ctx, func(tx pgx.Tx) error { return insertTx(ctx, tx, r, "BeginFunc", pid) })
	})
	assert.ErrorIs(t, beginErr, advisory.ErrCommitUnconfirmed, "round %d: BeginFunc whose COMMIT's wait was cancelled", r)
	doTook, doErr := cancelledCommit(ctx, primary, func(pid chan<- uint32) error {
		return m.DoTx(ctx, t.Name()+"/dotx", func(ctx context.Context, tx pgx.Tx) error {
			return insertTx(ctx, tx, r, "DoTx", pid)
		})
	})
	assert.ErrorIs(t, doErr, advisory.ErrCommitUnconfirmed, "round %d: DoTx whose COMMIT's wait was cancelled", r)

	lap.mark("short, BeginFunc, DoTx")
	b.pause(true) // the first token after the failover is the test's own: see afterFailover
	pair.CrashPrimary()
	lap.mark("crash")
	require.NoError(t, pair.Promote(ctx), "round %d", r)
	lap.mark("promote")
	assert.Empty(t, b.returnedWhileDown(r, down), "round %d: tokens returned while the standby was down", r)
	require.NoError(t, pair.Rebuild(ctx), "round %d", r)
	lap.mark("rebuild")
	select {
	case <-txLock.Done(): // the crash ended its session
	case <-time.After(10 * time.Second):
		t.Errorf("round %d: %s not told of the crash within 10s", r, txLock.Name())
	}

	after, stale := afterFailover(ctx, t, m, both, b, r+1)
	b.pause(false)
	lap.mark("next holder, stale writes")
	t.Logf("round %d: short Token -> %s; BeginFunc -> %s in %v; DoTx -> %s in %v", r,
		b.short(r), errText(beginErr), beginTook.Round(time.Millisecond), errText(doErr), doTook.Round(time.Millisecond))
	t.Logf("round %d: before: %s; after: new holder's token %d; stale writes %s", r, b.summary(r), after, stale)
	t.Logf("round %d: %s", r, lap)
	return true
}

// afterFailover takes the lock on the new primary (epoch e) and the first token there (the
// standby is back, so it must succeed; the workers take none until it is done), and while
// holding the lock tries a stale holder's write with the tokens from before the failover
// that could pass CheckToken (see staleCandidates). It returns the token and what the
// stale writes did.
func afterFailover(ctx context.Context, t *testing.T, m *advisory.Manager, both string, b *book, e int) (int64, string) {
	t.Helper()
	l, err := lockIn(ctx, m, t.Name(), e)
	require.NoError(t, err, "epoch %d: Lock on the new primary", e)
	defer l.Unlock(ctx)
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	start := time.Now()
	tok, err := l.Token(tctx)
	cancel()
	b.add(sample{who: "next", epoch: e, tok: tok, err: err, start: start, took: time.Since(start)})
	require.NoError(t, err, "epoch %d: Token on the new primary with its standby up", e)

	var results []string
	for _, old := range b.staleCandidates(e, tok) {
		committed, err := staleWrite(ctx, m, both, t.Name(), e, old)
		results = append(results, fmt.Sprintf("token %d: %s", old, errText(err)))
		assert.False(t, committed, "epoch %d: a stale holder's write with token %d (newest %d) committed", e, old, tok)
		if !committed {
			assert.ErrorIs(t, err, advisory.ErrStaleToken, "epoch %d: stale token %d", e, old)
		}
	}
	var rows int
	require.NoError(t, queryOn(ctx, both, "SELECT count(*) FROM sync_failover_writes WHERE round = $1", &rows, e))
	assert.Zero(t, rows, "epoch %d: stale writes on the new primary", e)
	return tok, fmt.Sprintf("%v (rows %d)", results, rows)
}

// staleWrite is a holder from before the failover writing in a plain transaction of its
// own, fenced by CheckToken. It reports whether the write committed.
func staleWrite(ctx context.Context, m *advisory.Manager, dsn, name string, e int, token int64) (bool, error) {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return false, err
	}
	defer conn.Close(ctx)
	tx, err := conn.Begin(ctx)
	if err != nil {
		return false, err
	}
	defer tx.Rollback(ctx)
	if err := m.CheckToken(ctx, tx, name, token); err != nil {
		return false, err
	}
	if _, err := tx.Exec(ctx, "INSERT INTO sync_failover_writes VALUES ($1, $2)", e, token); err != nil {
		return false, err
	}
	return tx.Commit(ctx) == nil, nil
}

// insertTx is the transaction of a BeginFunc or DoTx: it tells its backend's pid and
// writes a row, so that its COMMIT has to wait for the standby.
func insertTx(ctx context.Context, tx pgx.Tx, r int, via string, pid chan<- uint32) error {
	var p uint32
	if err := tx.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&p); err != nil {
		return err
	}
	pid <- p
	_, err := tx.Exec(ctx, "INSERT INTO sync_failover_tx VALUES ($1, $2)", r, via)
	return err
}

// cancelledCommit runs run, whose transaction sends its backend's pid on the channel;
// once that backend's COMMIT waits for the standby (wait_event SyncRep), it is cancelled
// with pg_cancel_backend from a connection to primaryDSN. It returns run's error and how
// long run took.
func cancelledCommit(ctx context.Context, primaryDSN string, run func(pid chan<- uint32) error) (time.Duration, error) {
	pid, done := make(chan uint32, 1), make(chan error, 1)
	start := time.Now()
	go func() { done <- run(pid) }()
	select {
	case err := <-done:
		return time.Since(start), fmt.Errorf("returned before its COMMIT: %w", err)
	case p := <-pid:
		if err := cancelSyncWait(ctx, primaryDSN, p); err != nil {
			return time.Since(start), err
		}
	}
	select {
	case err := <-done:
		return time.Since(start), err
	case <-time.After(20 * time.Second):
		return time.Since(start), errors.New("still running 20s after its COMMIT's wait was cancelled")
	}
}

// cancelSyncWait waits (10 s at most) until backend pid waits for synchronous
// replication, and cancels that wait.
func cancelSyncWait(ctx context.Context, primaryDSN string, pid uint32) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		var waiting bool
		err := queryOn(ctx, primaryDSN, `SELECT coalesce(bool_or(wait_event = 'SyncRep'), false)
			FROM pg_stat_activity WHERE pid = $1`, &waiting, pid)
		if err != nil {
			return err
		}
		if waiting {
			var ok bool
			return queryOn(ctx, primaryDSN, "SELECT pg_cancel_backend($1)", &ok, pid)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backend %d did not wait for the standby within 10s", pid)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func errText(err error) string {
	if err == nil {
		return "nil"
	}
	switch {
	case errors.Is(err, advisory.ErrCommitUnconfirmed):
		return "ErrCommitUnconfirmed"
	case errors.Is(err, advisory.ErrStaleToken):
		return "ErrStaleToken"
	}
	return err.Error()
}
