package modelcheck

import (
	"context"
	"fmt"
	"time"
)

// Before the fenced rows are read: waiting for the COMMITs that may still run on a
// backend whose client has given up on it.

// waitGone polls until none of the backends pids is left, for up to settleBound.
func (w *world) waitGone(pids []int32) string {
	if len(pids) == 0 {
		return ""
	}
	return w.pollZero(fmt.Sprintf("of the backends %v of failed fenced calls still run", pids),
		"SELECT count(*) FROM pg_stat_activity WHERE pid = ANY($1)", pids)
}

// txWait is the backend of a transaction holding whose COMMIT may still run, and an
// instant within that holding's transaction. The transaction is over once the backend
// is gone, or out of any transaction, or in one that began after since: behind a
// transaction pooler the backend outlives its client's connection and serves other
// clients, so waiting for it to be gone would never end.
type txWait struct {
	pid   int32
	since time.Time
}

// waitTxOver polls until the transactions of waits are over, for up to settleBound.
func (w *world) waitTxOver(waits []txWait) string {
	if len(waits) == 0 {
		return ""
	}
	pids, since := make([]int32, len(waits)), make([]time.Time, len(waits))
	for i, t := range waits {
		pids[i], since[i] = t.pid, t.since
	}
	return w.pollZero(fmt.Sprintf("of the backends %v of transaction holdings whose COMMIT was in doubt are still in "+
		"that transaction", pids), `SELECT count(*) FROM pg_stat_activity a
		JOIN unnest($1::int[], $2::timestamptz[]) AS t(pid, since) ON a.pid = t.pid
		WHERE a.xact_start < t.since`, pids, since)
}

// pollZero polls the count query until it returns 0, for up to settleBound; else it
// says how many are left, and what.
func (w *world) pollZero(what, query string, args ...any) string {
	deadline := time.Now().Add(settleBound)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var left int
		err := w.admin.QueryRow(ctx, query, args...).Scan(&left)
		cancel()
		switch {
		case err != nil:
			return "reading pg_stat_activity: " + err.Error()
		case left == 0:
			return ""
		case time.Now().After(deadline):
			return fmt.Sprintf("%d %s %v later", left, what, settleBound)
		}
		time.Sleep(5 * time.Millisecond) // polling interval
	}
}
