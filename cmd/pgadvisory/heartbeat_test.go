package main_test

import (
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestRunHeartbeatWaitsBehindAnIdleReaper (issue 37, item 2): behind a proxy that closes
// connections silent for 2 s (pgtest.IdleProxy, as HAProxy's "timeout client" does), run
// --heartbeat 500ms waits 4 s for a lock held elsewhere and runs its command, its wait
// never cut; with --heartbeat 0 the wait is cut at the reaper's 2 s: with
// --connect-timeout 0 run exits (69), and by default (issue 44 item 7) it says so,
// reconnects and waits again.
func TestRunHeartbeatWaitsBehindAnIdleReaper(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	proxy, err := pgtest.StartIdleProxy("127.0.0.1:"+strconv.Itoa(srv.Port()), 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	env := []string{"DATABASE_URL=" + pgtest.WithPairs(strings.Replace(srv.DSN(), "port="+strconv.Itoa(srv.Port()),
		"port="+strconv.Itoa(proxy.Port()), 1), "host=127.0.0.1")}
	for _, tc := range []struct {
		beat, connectTimeout string
		reconnects           bool // the reaper cuts the wait and run reconnects
		code                 int
	}{
		{"500ms", "30s", false, 0},
		{"0", "0", false, 69},
		{"0", "30s", true, 0},
	} {
		name := t.Name() + "/" + tc.beat + "/" + tc.connectTimeout
		m, held := holdLock(t, name, "")
		// Behind a proxy the default heartbeat is 2s: it is always given.
		p := startEnv(t, env, "run", "--heartbeat", tc.beat, "--connect-timeout", tc.connectTimeout,
			"--name", name, "--", "true")
		// The lock is held 4 s from when run waits for it, not from when it started: a
		// process that took 2 s to start and connect (16 tests at once on 2 cores) would
		// otherwise wait less than the reaper's 2 s.
		waitForWaiter(t, m, name, "")
		var freed atomic.Bool
		time.AfterFunc(4*time.Second, func() { freed.Store(true); held.Unlock(t.Context()) })
		r := wait(t, p)
		require.Equal(t, tc.code, r.code, "%s: %s", name, r.stderr)
		assert.Equal(t, tc.reconnects, strings.Contains(r.stderr, "lost the connection while waiting"), "%s: %s", name, r.stderr)
		if tc.code == 0 {
			assert.GreaterOrEqual(t, r.took, 4*time.Second)
		} else {
			assert.False(t, freed.Load(), "without a heartbeat the reaper cut the wait, before the lock was free")
		}
		t.Logf("heartbeat %s, connect-timeout %s: exit %d after %v", tc.beat, tc.connectTimeout, r.code,
			r.took.Round(time.Millisecond))
	}
}
