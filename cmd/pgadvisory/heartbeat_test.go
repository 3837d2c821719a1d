package main_test

import (
	"strconv"
	"strings"
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
		_, held := holdLock(t, name, "")
		time.AfterFunc(4*time.Second, func() { held.Unlock(t.Context()) })
		// Behind a proxy the default heartbeat is 2s: it is always given.
		r := wait(t, startEnv(t, env, "run", "--heartbeat", tc.beat, "--connect-timeout", tc.connectTimeout,
			"--name", name, "--", "true"))
		require.Equal(t, tc.code, r.code, "%s: %s", name, r.stderr)
		assert.Equal(t, tc.reconnects, strings.Contains(r.stderr, "lost the connection while waiting"), "%s: %s", name, r.stderr)
		if tc.code == 0 {
			assert.GreaterOrEqual(t, r.took, 4*time.Second)
		} else {
			assert.Less(t, r.took, 4*time.Second, "without a heartbeat the reaper cut the wait")
		}
		t.Logf("heartbeat %s, connect-timeout %s: exit %d after %v", tc.beat, tc.connectTimeout, r.code,
			r.took.Round(time.Millisecond))
	}
}
