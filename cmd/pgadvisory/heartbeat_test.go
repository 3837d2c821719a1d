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
// --heartbeat 500ms waits 4 s for a lock held elsewhere and runs its command; with
// --heartbeat 0 the wait is cut at the reaper's 2 s.
func TestRunHeartbeatWaitsBehindAnIdleReaper(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	proxy, err := pgtest.StartIdleProxy("127.0.0.1:"+strconv.Itoa(srv.Port()), 2*time.Second)
	require.NoError(t, err)
	t.Cleanup(func() { proxy.Close() })
	env := []string{"DATABASE_URL=" + pgtest.WithPairs(strings.Replace(srv.DSN(), "port="+strconv.Itoa(srv.Port()),
		"port="+strconv.Itoa(proxy.Port()), 1), "host=127.0.0.1")}
	for _, beat := range []bool{false, true} {
		name := t.Name() + "/" + strconv.FormatBool(beat)
		_, held := holdLock(t, name, "")
		time.AfterFunc(4*time.Second, func() { held.Unlock(t.Context()) })
		args := []string{"run", "--heartbeat", "0", "--name", name, "--", "true"} // behind a proxy the default is 2s
		if beat {
			args[2] = "500ms"
		}
		r := wait(t, startEnv(t, env, args...))
		if beat {
			require.Equal(t, 0, r.code, "waited past the reaper with a heartbeat: %s", r.stderr)
			assert.GreaterOrEqual(t, r.took, 4*time.Second)
		} else {
			assert.NotEqual(t, 0, r.code, "without a heartbeat the reaper cut the wait: %s", r.stderr)
			assert.Less(t, r.took, 4*time.Second)
		}
		t.Logf("heartbeat %v: exit %d after %v", beat, r.code, r.took.Round(time.Millisecond))
	}
}
