package migrations_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// checkRound asserts what work fencing promises, on what the server recorded:
//   - no sample of pg_stat_activity shows the work sessions of two workers at once, and
//     none of the victim's work sessions is seen after the next holder's first;
//   - when each migration began, no other worker's work session was left
//     (work_log.others, read by the migration itself);
//   - a migration the victim committed ended before the next holder's work began;
//   - every migration was applied exactly once, and the tool's version is the last one,
//     clean;
//   - the victim died of the SIGKILL and every other worker exited 0;
//   - every work session carried the tag of its worker's holding (its pid is one of the
//     worker's lock sessions).
func checkRound(t *testing.T, ctx context.Context, sc scenario, conn *pgx.Conn, ws []*worker, victim, next int,
	tln *timeline, rows []workRow) {
	t.Helper()
	require.GreaterOrEqual(t, next, 0, "another worker took the lock after the victim")
	if n := len(tln.overlaps); n > 0 {
		s := tln.overlaps[0]
		t.Errorf("%d samples of pg_stat_activity showed the work of two holders; the first, at %v: %s", n, s.at, describeWork(s.work))
	}
	nextFirst := tln.work[next]
	require.NotNil(t, nextFirst, "the next holder's work was seen")
	if v := tln.work[victim]; v != nil {
		assert.True(t, v.last.Before(nextFirst.first), "the victim's work was last seen at %v, the next holder's first at %v",
			v.last, nextFirst.first)
	}
	perVersion := map[int]int{}
	for _, r := range rows {
		perVersion[r.version]++
		assert.Empty(t, r.others, "other holders' sessions when migration %d began (%s)", r.version, r.app)
		if workerOf(workName, r.app) == victim {
			assert.True(t, r.finished.Before(nextFirst.first), "the victim's migration %d ended at %v, after the next holder's work began at %v",
				r.version, r.finished, nextFirst.first)
		}
	}
	for v := 1; v <= lastVersion; v++ {
		assert.Equal(t, 1, perVersion[v], "migration %d applied exactly once", v)
	}
	version, dirty, err := sc.version(ctx, conn)
	require.NoError(t, err)
	assert.Equal(t, int64(lastVersion), version, "the tool's version")
	assert.False(t, dirty, "the tool's dirty flag")
	checkExits(t, ws, victim)
	checkTags(t, tln)
}

func describeWork(ws []workSeen) string {
	var b strings.Builder
	for _, w := range ws {
		fmt.Fprintf(&b, "[pid %d %q %s] ", w.pid, w.app, w.waitEvent)
	}
	return b.String()
}

func checkExits(t *testing.T, ws []*worker, victim int) {
	t.Helper()
	for _, w := range ws {
		st := w.cmd.ProcessState
		if w.n == victim {
			ws, _ := st.Sys().(syscall.WaitStatus)
			assert.True(t, ws.Signaled() && ws.Signal() == syscall.SIGKILL, "the victim w%d ended by SIGKILL: %v", w.n, st)
			continue
		}
		if !assert.Equal(t, 0, st.ExitCode(), "worker w%d's exit code", w.n) {
			t.Logf("worker w%d:\n%s", w.n, w.out.String())
		}
	}
}

// tagHolder is the holder part of a work tag: pgadv/DB/KEY/PID.NONCE, PID in base 36,
// with the pooled mark (".t") while a WorkConfig connection has not yet seen that it
// reaches its backend directly (see the root's work_tag.go).
var tagHolder = regexp.MustCompile(`^pgadv/[0-9a-z]+/p?[0-9a-z]+/([0-9a-z]+)\.[0-9a-z]{6}(\.t)? `)

func checkTags(t *testing.T, tln *timeline) {
	t.Helper()
	for pid, b := range tln.backends {
		m := tagHolder.FindStringSubmatch(b.app)
		if !assert.NotNil(t, m, "work session %d carries a holding's tag: %q", pid, b.app) {
			continue
		}
		holder, err := strconv.ParseUint(m[1], 36, 32)
		require.NoError(t, err)
		w, seen := tln.lockPIDs[uint32(holder)]
		assert.True(t, seen && w == b.worker, "work session %d (%q) is tagged with a session of its own worker's lock (the tag's pid %d is of worker %d)",
			pid, b.app, holder, w)
	}
}
