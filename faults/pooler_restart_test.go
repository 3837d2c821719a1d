package faults_test

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestPoolerKilledHolderFreesItsLock: a holder process behind PgBouncer (transaction
// mode) is SIGKILLed mid-transaction. PgBouncer sees its client's socket close, closes the
// server connection, the backend ends and its transaction's lock is free for the next
// client through the pooler.
func TestPoolerKilledHolderFreesItsLock(t *testing.T) {
	needPoolNet(t)
	var figs []poolFigure
	for r := 0; r < rounds(); r++ {
		cases := []*poolerCase{startCase(t, "defaults")}
		t0 := time.Now()
		for _, p := range allHolders(cases) {
			require.NoError(t, syscall.Kill(-p.h.cmd.Process.Pid, syscall.SIGKILL))
		}
		observe(t, cases, t0, 15*time.Second, true)
		noticed(cases, t0)
		figs = append(figs, logFigures(t, "client SIGKILL", cases)...)
		for _, p := range allHolders(cases) {
			assert.True(t, p.fig.freed != never && p.fig.freed < 5*time.Second, "freed within 5 s of the kill: %v", p.fig)
			assert.True(t, p.fig.taken != never && p.fig.taken < 5*time.Second, "taken within 5 s of the kill: %v", p.fig)
		}
		endCases(t, cases)
	}
	summarizeFigures(t, "client SIGKILL", figs)
}

// TestPoolerRestartTellsAndFrees: PgBouncer itself is stopped (SIGTERM: its immediate
// shutdown; SIGKILL: the kernel closes its sockets) while holders hold transactions
// through it, and started again on its port. Each holder is told, each backend ends and
// frees its lock, and a client through the restarted PgBouncer takes the key.
func TestPoolerRestartTellsAndFrees(t *testing.T) {
	needPoolNet(t)
	for _, s := range []struct {
		name string
		sig  syscall.Signal
	}{{"SIGTERM", syscall.SIGTERM}, {"SIGKILL", syscall.SIGKILL}} {
		t.Run(s.name, func(t *testing.T) {
			var figs []poolFigure
			for r := 0; r < rounds(); r++ {
				figs = append(figs, restartRound(t, s.sig, "pgbouncer "+s.name)...)
			}
			summarizeFigures(t, "pgbouncer "+s.name, figs)
		})
	}
}

func restartRound(t *testing.T, sig syscall.Signal, fault string) []poolFigure {
	c := startCase(t, "defaults")
	cases := []*poolerCase{c}
	back := make(chan time.Duration, 1)
	t0 := time.Now()
	go func() {
		ctx := ctxT(t, 30*time.Second)
		if err := c.b.Stop(ctx, sig); err != nil {
			t.Errorf("stop PgBouncer: %v", err)
		}
		if err := c.b.Start(ctx); err != nil {
			t.Errorf("start PgBouncer again: %v", err)
		}
		back <- time.Since(t0)
	}()
	observe(t, cases, t0, 15*time.Second, true)
	noticed(cases, t0)
	t.Logf("%s: PgBouncer served again %.2fs after the signal", fault, (<-back).Seconds())
	figs := logFigures(t, fault, cases)
	for _, p := range c.holders {
		assert.True(t, p.fig.told != never && p.fig.told < 5*time.Second, "told within 5 s: %v", p.fig)
		assert.True(t, p.fig.freed != never && p.fig.freed < 5*time.Second, "freed within 5 s: %v", p.fig)
		assert.NotEqual(t, never, p.fig.taken, "taken through the restarted PgBouncer: %v", p.fig)
	}
	endCases(t, cases)
	return figs
}

// TestPoolerSafeShutdownWaitsForHoldings: SIGINT asks PgBouncer 1.18 for a safe shutdown
// (PAUSE, then SHUTDOWN), which waits until every server connection is released. A
// holding transaction keeps it running, its lock held and its holder untold (the
// heartbeat goes on working), while every new transaction through it stalls. Debian's
// pgbouncer.service stops PgBouncer with SIGINT (KillSignal=SIGINT), so a systemctl stop
// or restart waits for the holdings, up to its stop timeout. SIGTERM then ends it at once.
func TestPoolerSafeShutdownWaitsForHoldings(t *testing.T) {
	needPoolNet(t)
	c := startCase(t, "defaults")
	cases := []*poolerCase{c}
	t0 := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	err := c.b.Stop(ctx, syscall.SIGINT)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded, "PgBouncer still runs 3 s after SIGINT")
	conn := dialProbe(c.b)
	require.NotNil(t, conn, "PgBouncer still accepts clients")
	defer conn.Close(context.Background())
	ctx, cancel = context.WithTimeout(context.Background(), time.Second)
	_, err = conn.Exec(ctx, "SELECT 1").ReadAll()
	cancel()
	require.Error(t, err, "a new transaction waits for the shutdown")
	// Longer than a heartbeat's deadline: a beat that stalled would tell its holder.
	o := observe(t, cases, t0, heartbeatEvery+heartbeatDeadline+time.Second, false)
	for _, p := range c.holders {
		assert.Equal(t, never, p.fig.told, "not told while PgBouncer waits: %v", p.fig)
		assert.Equal(t, never, p.fig.freed, "still held while PgBouncer waits: %v", p.fig)
	}
	term := time.Since(t0)
	require.NoError(t, c.b.Stop(ctxT(t, 10*time.Second), syscall.SIGTERM))
	o.extend(t, cases, 5*time.Second, false)
	t.Logf("SIGTERM came %.2fs after SIGINT", term.Seconds())
	logFigures(t, "pgbouncer SIGINT", cases)
	for _, p := range c.holders {
		assert.True(t, p.fig.told > term && p.fig.freed > term, "told and freed once SIGTERM came: %v", p.fig)
	}
	endCases(t, cases)
}

// TestPoolerIdleTransactionTimeout: with idle_transaction_timeout (3 s here) PgBouncer
// ends a holding whose client has sent nothing for that long, and tells the client; a
// holder whose heartbeat runs a statement every 500 ms keeps its lock, and so does the
// library's, whose heartbeat is on by default behind a transaction pooler (every 2 s).
func TestPoolerIdleTransactionTimeout(t *testing.T) {
	needPoolNet(t)
	const itt = 3 * time.Second
	var figs []poolFigure
	for r := 0; r < rounds(); r++ {
		cases := []*poolerCase{startCase(t, "itt=3", pgtest.WithIdleTransactionTimeout(int(itt/time.Second)))}
		idle := cases[0].holders[0]
		t0 := idle.locked // the idle transaction's clock starts at its last statement
		observe(t, cases, t0, itt+5*time.Second, false)
		noticed(cases, t0)
		figs = append(figs, logFigures(t, "no fault, itt=3", cases)...)
		assert.True(t, idle.fig.told >= itt-500*time.Millisecond && idle.fig.told < itt+5*time.Second,
			"the idle holder is told at PgBouncer's timeout: %v", idle.fig)
		assert.True(t, idle.fig.freed >= itt-500*time.Millisecond && idle.fig.freed < itt+5*time.Second,
			"the idle holding is ended at PgBouncer's timeout: %v", idle.fig)
		for _, p := range cases[0].holders[1:] { // the heartbeat's, the library's (beating every 2 s)
			assert.Equal(t, never, p.fig.told, "a heartbeat keeps the transaction from idling: %v", p.fig)
			assert.Equal(t, p.pid, holderOf(t, p.key), "a beating holder still holds its key")
		}
		endCases(t, cases)
	}
	summarizeFigures(t, "no fault, itt=3", figs)
}

// endCases kills the holders of cases and stops their PgBouncers, which ends what they
// still held. If the test has failed, or ADVISORY_POOLER_LOG is set, it logs each
// PgBouncer's log first.
func endCases(t *testing.T, cases []*poolerCase) {
	stopHolders(cases)
	for _, c := range cases {
		if t.Failed() || os.Getenv("ADVISORY_POOLER_LOG") != "" {
			t.Logf("PgBouncer %s:\n%s", c.name, c.b.Log())
		}
		c.b.Close()
	}
}
