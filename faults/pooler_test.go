package faults_test

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// The pooler tests hold locks the way the library will behind a transaction pooler (one
// open transaction per lock, on one PgBouncer client connection) with raw pgconn, in
// holder processes in the pooler network's client namespace, and measure for each fault
// when the holder is told and when the lock is free. See docs/pooler-faults.md.

// watches are the ways a holder learns of a loss: a reader blocked on the idle socket,
// a SELECT 1 every 500 ms under a 5 s deadline, and the library itself (a Manager that
// finds the pooler and holds by transaction: its watcher, and its default heartbeat,
// every 2 s under a 5 s bound). Holders are in this order in a poolerCase.
var watches = []string{"idle", "heartbeat", "library"}

// needPoolNet stops a test that needs the pooler network and a server where there are
// none (needNet, pgtest.Need). Under -short it is skipped.
func needPoolNet(t *testing.T) {
	t.Helper()
	needNet(t, poolNet != nil, poolErr, true)
	dsn(t)
	networkLane.join(t)
}

// poolerCase is one PgBouncer (transaction mode, three server connections, in the
// pooler namespace) and its holders behind the client link, one for each watch.
type poolerCase struct {
	name    string
	b       *pgtest.PgBouncer
	holders []*poolHolder // one per watch, in the order of watches
}

// poolHolder is a holder process as its LOCKED line and PgBouncer's console describe it,
// and what was measured of it.
type poolHolder struct {
	h                    *helper
	key                  advisory.Key
	pid                  uint32    // the backend whose transaction holds key
	locked               time.Time // when its LOCKED line came
	clientPtr, serverPtr string    // PgBouncer's names of its two ends ("0x..."), as in its log
	fig                  poolFigure
}

// startCase starts PgBouncer with opts and a holder for each watch, and returns once
// each holds its key, as pg_locks shows.
func startCase(t *testing.T, name string, opts ...pgtest.PgBouncerOption) *poolerCase {
	t.Helper()
	opts = append([]pgtest.PgBouncerOption{pgtest.WithPoolerNet(poolNet), pgtest.WithPoolSize(3)}, opts...)
	c := &poolerCase{name: name, b: pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, opts...)}
	for _, w := range watches {
		c.holders = append(c.holders, startPoolHolder(t, c, w))
	}
	t.Cleanup(func() { // a round that stopped at a failed require: endCases did not run
		if log := c.b.Log(); t.Failed() && log != "" {
			t.Logf("PgBouncer %s:\n%s", name, log)
		}
	})
	return c
}

func startPoolHolder(t *testing.T, c *poolerCase, watch string) *poolHolder {
	t.Helper()
	key := advisory.KeyOf(fmt.Sprintf("%s/%s/%s/%d", t.Name(), c.name, watch, time.Now().UnixNano()))
	h := startHelper(t, "poolhold", map[string]string{"ADVISORY_FAULT_DSN": poolNet.ClientDSN(c.b),
		"ADVISORY_FAULT_KEY": strconv.FormatInt(int64(key), 10), "ADVISORY_FAULT_WATCH": watch}, poolNet.InClient()...)
	locked := h.expect(t, "LOCKED", 30*time.Second)
	f := strings.Fields(locked.text)
	require.Len(t, f, 4, "LOCKED <backend pid> <local port> <keepalive>")
	require.Equal(t, "10/5/4/30000", f[3], "the holding's server-side keepalive is set for its transaction")
	pid, _ := strconv.ParseUint(f[1], 10, 32)
	p := &poolHolder{h: h, key: key, pid: uint32(pid), locked: locked.at, fig: poolFigure{pooler: c.name, watch: watch}}
	require.EqualValues(t, p.pid, holderOf(t, key), "the holder's transaction holds its key")
	p.clientPtr, p.serverPtr = pgbouncerPtrs(t, c.b, f[2], p.pid)
	return p
}

// pgbouncerPtrs returns PgBouncer's names for the client connection from the client
// namespace's port and for the server connection to backend pid, and checks that
// PgBouncer links the two.
func pgbouncerPtrs(t *testing.T, b *pgtest.PgBouncer, port string, pid uint32) (client, server string) {
	t.Helper()
	clients, err := b.Show(ctxT(t, 10*time.Second), "CLIENTS")
	require.NoError(t, err)
	servers, err := b.Show(ctxT(t, 10*time.Second), "SERVERS")
	require.NoError(t, err)
	i := slices.IndexFunc(clients, func(r map[string]string) bool {
		return r["addr"] == poolNet.ClientIP() && r["port"] == port
	})
	j := slices.IndexFunc(servers, func(r map[string]string) bool { return r["remote_pid"] == strconv.Itoa(int(pid)) })
	require.True(t, i >= 0 && j >= 0, "PgBouncer lists the holder's client (%s) and server (%d)", port, pid)
	require.Equal(t, servers[j]["ptr"], clients[i]["link"], "PgBouncer links the holder to its backend")
	return clients[i]["ptr"], servers[j]["ptr"]
}

// allHolders returns the holders of cases.
func allHolders(cases []*poolerCase) []*poolHolder {
	var out []*poolHolder
	for _, c := range cases {
		out = append(out, c.holders...)
	}
	return out
}

// noticed sets each holder's noticed figure: when PgBouncer first logged, at or after t0
// and after the holder took its lock, that it closed the holder's client or server
// connection, and why. (PgBouncer reuses a closed connection's memory, and so its name,
// for a later one: a line from before the holder's lock may be another client's.)
func noticed(cases []*poolerCase, t0 time.Time) {
	for _, c := range cases {
		lines := c.b.LogLines()
		for _, p := range c.holders {
			p.fig.noticed = never
			// PgBouncer's clock is read in milliseconds: allow for the rounding.
			from := t0.Add(-time.Millisecond)
			if p.locked.After(from) {
				from = p.locked
			}
			for _, l := range lines {
				if l.At.Before(from) || !strings.Contains(l.Text, "closing because") ||
					!strings.Contains(l.Text, "C-"+p.clientPtr) && !strings.Contains(l.Text, "S-"+p.serverPtr) {
					continue
				}
				p.fig.noticed, p.fig.noticedText = max(l.At.Sub(t0), 0), l.Text[strings.Index(l.Text, "closing because"):]
				break
			}
		}
	}
}

// rounds is how many times a pooler test repeats its fault: ADVISORY_POOLER_ROUNDS,
// default 1.
func rounds() int {
	if v, err := strconv.Atoi(os.Getenv("ADVISORY_POOLER_ROUNDS")); err == nil && v > 0 {
		return v
	}
	return 1
}

// stopHolders kills the holder processes of cases and waits for them.
func stopHolders(cases []*poolerCase) {
	for _, p := range allHolders(cases) {
		p.h.kill()
	}
}
