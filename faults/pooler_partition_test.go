package faults_test

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The bounds these tests assert, from the settings (generous: tight figures are in
// docs/pooler-faults.md). The holder's keepalive budget is 10 s (4 s + 3 x 2 s, user timeout
// 10 s), its heartbeat fails within 0.5 s + 5 s; the server's is 30 s (tcp_user_timeout)
// and frees no sooner than 20 s (its probing phase); PgBouncer's 10/2/3 is 16 s.
const (
	idleToldBy      = 10*time.Second + 1500*time.Millisecond
	heartbeatToldBy = heartbeatEvery + heartbeatDeadline + 1500*time.Millisecond
	serverFreesFrom = 20*time.Second - 500*time.Millisecond
	serverFreesBy   = 30*time.Second + 3*time.Second
	bouncerKeepBy   = 16*time.Second + 3*time.Second
	// The library's holder: its client keepalive (10 s) or its default heartbeat (2 s,
	// each beat under 5 s), whichever sees the cut first.
	libraryBeatBy = 2*time.Second + 5*time.Second + 1500*time.Millisecond
)

// stagger waits 0–3 s, so that the fault meets the keepalive and idle timers (which
// started when each holder last spoke) at a different phase in each round.
func stagger(t *testing.T) {
	d := rand.N(3 * time.Second)
	t.Logf("the fault comes %.2fs after the holders locked", d.Seconds())
	time.Sleep(d)
}

// poolerConfig is a PgBouncer configuration under a fault, and what the test asserts of
// it beyond what it asserts of every configuration.
type poolerConfig struct {
	name       string
	opts       []pgtest.PgBouncerOption
	freesBy    time.Duration // each lock is free by then (0: not asserted)
	idleToldBy time.Duration // the idle watcher is told by then (0: not asserted)
	toldFirst  bool          // each holder is told before its lock is free
}

// startConfigs starts a poolerCase for each configuration.
func startConfigs(t *testing.T, configs []poolerConfig) []*poolerCase {
	t.Helper()
	cases := make([]*poolerCase, len(configs))
	for i, c := range configs {
		cases[i] = startCase(t, c.name, c.opts...)
	}
	return cases
}

// assertConfig asserts of c's holders what cfg says.
func assertConfig(t *testing.T, cfg poolerConfig, c *poolerCase) {
	t.Helper()
	idle := c.holders[0]
	if cfg.idleToldBy > 0 {
		assert.True(t, idle.fig.told != never && idle.fig.told <= cfg.idleToldBy, "the idle watcher is told: %v", idle.fig)
	}
	for _, p := range c.holders {
		if cfg.freesBy > 0 {
			assert.True(t, p.fig.freed != never && p.fig.freed <= cfg.freesBy, "freed by PgBouncer: %v", p.fig)
		}
		if cfg.toldFirst && p.fig.freed != never {
			assert.True(t, p.fig.told != never && p.fig.told < p.fig.freed, "told before the lock is freed: %v", p.fig)
		}
	}
}

// clientCutConfigs are the configurations TestPoolerClientPartition runs side by side.
var clientCutConfigs = []poolerConfig{
	{name: "itt=15", opts: []pgtest.PgBouncerOption{pgtest.WithIdleTransactionTimeout(15)},
		freesBy: 15*time.Second + 3*time.Second, toldFirst: true},
	{name: "no timeouts", toldFirst: true},
	{name: "keepalive 10/2/3", opts: []pgtest.PgBouncerOption{pgtest.WithTCPKeepalive(10, 2, 3)},
		freesBy: bouncerKeepBy, toldFirst: true},
	// PgBouncer's keepalive budget (4 s) is shorter than the holder's (10 s): measured, the
	// inversion.
	{name: "keepalive 2/1/2", opts: []pgtest.PgBouncerOption{pgtest.WithTCPKeepalive(2, 1, 2)}},
}

// TestPoolerClientPartition cuts the link between the holders and PgBouncer (real drops,
// both ways) under four PgBouncer configurations at once: idle_transaction_timeout=15;
// no timeout and the OS's keepalive (2 h 11 min); tcp_keepidle/intvl/cnt = 10/2/3 (16 s);
// and 2/1/2 (4 s, shorter than the holder's budget). The holders, with the library's
// client keepalive, are told within their budget; the lock is freed only by PgBouncer,
// by its idle-transaction timeout or its keepalive on the client's socket, and never
// before the holder was told when that budget is longer than the holder's. With 2/1/2 it
// is shorter: the figures show the lock freed before the holder knows.
func TestPoolerClientPartition(t *testing.T) {
	needPoolNet(t)
	var figs []poolFigure
	for r := 0; r < rounds(); r++ {
		cases := startConfigs(t, clientCutConfigs)
		stagger(t)
		t0 := time.Now()
		require.NoError(t, poolNet.CutClientLink())
		observe(t, cases, t0, 25*time.Second, true)
		require.NoError(t, poolNet.Heal())
		noticed(cases, t0)
		figs = append(figs, logFigures(t, "client|pooler cut", cases)...)
		for i, c := range cases {
			idle, beating := c.holders[0], c.holders[1]
			assert.True(t, idle.fig.told != never && idle.fig.told <= idleToldBy, "told by the client keepalive: %v", idle.fig)
			assert.True(t, beating.fig.told != never && beating.fig.told <= heartbeatToldBy, "told by the heartbeat: %v", beating.fig)
			lib := c.holders[2]
			assert.True(t, lib.fig.told != never && lib.fig.told <= max(idleToldBy, libraryBeatBy),
				"the library's holder told by its keepalive or heartbeat: %v", lib.fig)
			assertConfig(t, clientCutConfigs[i], c)
		}
		endCases(t, cases)
	}
	summarizeFigures(t, "client|pooler cut", figs)
}

// serverCutConfigs are the configurations TestPoolerServerPartition runs side by side.
var serverCutConfigs = []poolerConfig{
	{name: "keepalive off"}, // the idle watcher is not told: measured
	{name: "keepalive 10/2/3", opts: []pgtest.PgBouncerOption{pgtest.WithTCPKeepalive(10, 2, 3)},
		idleToldBy: bouncerKeepBy, toldFirst: true},
}

// TestPoolerServerPartition cuts the link between PgBouncer and the server (real drops,
// both ways, on the server's port only) under two PgBouncer configurations at once: the
// OS's keepalive, and tcp_keepidle/intvl/cnt = 10/2/3. The server frees each lock by
// the keepalive the holding set for its transaction (10/5/4, tcp_user_timeout 30 s). A
// heartbeat tells its holder well before; an idle watcher hears of it only if PgBouncer's
// keepalive finds the dead server connection and closes the client. After the link heals,
// a client through PgBouncer takes each key. The library's holder, whose heartbeat is on by
// default behind a transaction pooler, is told first in every configuration.
func TestPoolerServerPartition(t *testing.T) {
	needPoolNet(t)
	var figs []poolFigure
	for r := 0; r < rounds(); r++ {
		cases := startConfigs(t, serverCutConfigs)
		stagger(t)
		t0 := time.Now()
		require.NoError(t, poolNet.CutServerLink(srv.Port()))
		o := observe(t, cases, t0, serverFreesBy+time.Second, false)
		require.NoError(t, poolNet.Heal())
		healed := time.Since(t0)
		for _, p := range allHolders(cases) {
			p.fig.healed = healed
		}
		o.extend(t, cases, 10*time.Second, true)
		noticed(cases, t0)
		figs = append(figs, logFigures(t, "pooler|server cut", cases)...)
		for i, c := range cases {
			beating := c.holders[1]
			assert.True(t, beating.fig.told != never && beating.fig.told <= heartbeatToldBy, "told by the heartbeat: %v", beating.fig)
			assert.Less(t, beating.fig.told, beating.fig.freed, "the heartbeat tells before the server frees: %v", beating.fig)
			lib := c.holders[2]
			assert.True(t, lib.fig.told != never && lib.fig.told <= libraryBeatBy,
				"the library's holder told by its default heartbeat: %v", lib.fig)
			assert.Less(t, lib.fig.told, lib.fig.freed, "the library's holder is told before the server frees: %v", lib.fig)
			for _, p := range c.holders {
				assert.True(t, p.fig.freed >= serverFreesFrom && p.fig.freed <= serverFreesBy,
					"freed by the server's keepalive for the transaction: %v", p.fig)
				assert.NotEqual(t, never, p.fig.taken, "taken through PgBouncer once the link healed: %v", p.fig)
			}
			assertConfig(t, serverCutConfigs[i], c)
		}
		endCases(t, cases)
	}
	summarizeFigures(t, "pooler|server cut", figs)
}
