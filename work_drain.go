package advisory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Work tags. A holding's tag is "pgadv/DB/KEY/PID.NONCE": the database's oid, the key
// (prefixed "p" in the two-int4 form, a key space of its own), the holding backend's pid
// and a random nonce, the numbers in base 36 so that the tag leaves room in the 63 bytes
// of application_name. Everything before the holder part (workPrefix) is the same for
// every holding of one lock; the holder part tells holdings apart, also two holdings on
// one backend (the nonce).

// drainTerminateSQL terminates each listed backend that is still the listed session: the
// same pid, application_name and backend_start ($3; NULL: not visible to the drain's
// role), and for a pooled tag the same transaction ($4, xact_start; NULL: any), so that
// neither a pid the server has given to a new session nor a pooled server connection
// that has moved on to another client's transaction is touched.
const drainTerminateSQL = `SELECT pg_catalog.count(pg_catalog.pg_terminate_backend(t.pid))
FROM ROWS FROM (pg_catalog.unnest($1::integer[]), pg_catalog.unnest($2::pg_catalog.text[]),
  pg_catalog.unnest($3::pg_catalog.timestamptz[]), pg_catalog.unnest($4::pg_catalog.timestamptz[]))
  AS t(pid, app, started, xact)
JOIN pg_catalog.pg_stat_activity a
  ON a.pid OPERATOR(pg_catalog.=) t.pid AND a.application_name OPERATOR(pg_catalog.=) t.app
  AND (t.started IS NULL OR a.backend_start OPERATOR(pg_catalog.=) t.started)
  AND (t.xact IS NULL OR a.xact_start OPERATOR(pg_catalog.=) t.xact)`

// drainPoll is how often a drain looks again while it waits.
const drainPoll = 20 * time.Millisecond

// drainExitBound bounds how long a drain waits for terminated sessions to go.
const drainExitBound = 10 * time.Second

// drainer is one Drain in progress. The sessions it waits for are fixed by its first
// listing (the candidates): those of earlier holdings running when the drain began.
// A session that appears later cannot have been running when the lock changed hands; it
// is terminated without waiting for it if its tag is plain, left alone if pooled (see
// sort), so that sessions opened in a loop cannot keep a drain going.
type drainer struct {
	s      *pin
	prefix string // the lock's tag prefix (see workPrefix)
	start  time.Time
	report DrainReport
	cut    time.Time               // when this holding began, on the server's clock (see list); zero before it
	wait   map[sessionKey]struct{} // the candidates
	index  map[sessionKey]int      // report.Sessions' index of each session reported
	keys   []sessionKey            // the key of each of report.Sessions
	passed map[uint32]struct{}     // pids of the sessions ignored (see drainer.covers)
}

// run lists the earlier holders' sessions until no candidate is left: it waits up to the
// drain wait for them to end on their own, then terminates those left and waits (bounded
// by drainExitBound) for them to go.
func (d *drainer) run(ctx context.Context) error {
	waitUntil := d.start.Add(d.s.m.set.drainWait)
	var exitBy time.Time
	for {
		listed, err := d.list(ctx)
		d.report.Took = time.Since(d.start)
		if err != nil {
			return err
		}
		live, late := d.sort(listed)
		d.note(live, late)
		if err := d.terminate(ctx, late); err != nil {
			return err
		}
		if len(live) == 0 {
			return nil
		}
		now := time.Now()
		if !now.Before(waitUntil) {
			if exitBy.IsZero() {
				exitBy = now.Add(drainExitBound)
			} else if now.After(exitBy) {
				return fmt.Errorf("%w: %s: %d sessions of earlier holders, running when the drain began, "+
					"still running %v after they were terminated", ErrWorkNotDrained, d.s.describe(), len(live), drainExitBound)
			}
			if err := d.terminate(ctx, live); err != nil {
				return err
			}
		}
		pause := drainPoll
		if w := time.Until(waitUntil); w > 0 && w < pause {
			pause = w
		}
		if !sleepCtx(ctx, pause) {
			return fmt.Errorf("advisory: drain %s: %w", d.s.describe(), ctx.Err())
		}
	}
}

// onLockConn runs one drain statement (stmt) on the lock's connection, taken from the
// watcher for it (as a transaction takes it). The statement runs under a context of its
// own, not the caller's ctx, which is checked before it (and between statements, see
// run): a statement interrupted by ctx would cost a CancelRequest, and under load its
// fallback deadline closes the connection, losing the lock for nothing; the statements
// are short, so cleanupTimeout bounds them. It returns the session's end error if the
// lock was lost meanwhile, else stmt's error.
func (d *drainer) onLockConn(ctx context.Context, stmt func(sctx context.Context) error) error {
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("advisory: drain %s: %w", d.s.describe(), err)
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), cleanupTimeout)
	defer cancel()
	err, ended := d.s.onHeld(sctx, func() error { return stmt(sctx) })
	if ended != nil {
		return ended
	}
	return err
}

// freshStats makes the next statement on the lock's connection read pg_stat_activity as
// it is now. Inside a transaction (a transaction holding's: see lease_tx.go) the server
// reads it once and shows that snapshot until the transaction ends, or until
// pg_stat_clear_snapshot; outside one, each statement reads it anew.
func (p *pin) freshStats(ctx context.Context) error {
	if p.pg.TxStatus() == 'I' {
		return nil
	}
	_, err := p.pg.Exec(ctx, "SELECT pg_catalog.pg_stat_clear_snapshot()").ReadAll()
	return err
}

// named prefixes a statement that runs on the lock's own connection with the comment
// naming the lock and when it was granted (see heldComment): pg_stat_activity.query
// shows the session's last statement, and Holders reads the name and the grant time from
// it, so after a drain, a token, an announcement or a heartbeat the lock still shows its
// name, and since when it is held (pgadvisory status, run's report of who holds it).
func (p *pin) named(sql string) string {
	switch {
	case p.m.activityName(p.name) == "" || p.multi:
		return sql
	case p.grantedAt.IsZero():
		return nameComment(p.name) + sql
	}
	return heldComment(p.name, p.grantedAt) + sql
}

// pgLocksKey returns the classid, objid and objsubid of the key's rows in pg_locks.
func pgLocksKey(key Key, pair bool) (uint32, uint32, int16) {
	subid := int16(1)
	if pair {
		subid = 2
	}
	return uint32(uint64(key) >> 32), uint32(key), subid
}

// note records what a listing found: new sessions, and those seen before that are gone.
// A late session (see sort) that is not seen again before the drain ends keeps After 0.
func (d *drainer) note(live, late []workSession) {
	now := time.Since(d.start)
	seen := map[sessionKey]bool{}
	for _, w := range slices.Concat(live, late) {
		k := w.key()
		seen[k] = true
		if _, ok := d.index[k]; !ok {
			d.index[k] = len(d.report.Sessions)
			d.report.Sessions = append(d.report.Sessions, DrainedSession{PID: w.pid, ApplicationName: w.app,
				User: w.user, State: w.state})
			d.keys = append(d.keys, k)
		}
	}
	for i := range d.report.Sessions {
		ds := &d.report.Sessions[i]
		if ds.After == 0 && !seen[d.keys[i]] {
			ds.After = max(now, time.Nanosecond)
			d.s.logDrained(*ds)
		}
	}
}

// terminate terminates the listed sessions not terminated yet.
func (d *drainer) terminate(ctx context.Context, sessions []workSession) error {
	var pids []int32
	var apps []string
	var started, xacts []pgtype.Timestamptz
	var sent []*DrainedSession // marked Terminated once the statement succeeded
	for _, w := range sessions {
		if ds := &d.report.Sessions[d.index[w.key()]]; !ds.Terminated {
			sent = append(sent, ds)
			xact := pgtype.Timestamptz{}
			if w.pooled {
				xact = w.xact
			}
			pids, apps = append(pids, int32(w.pid)), append(apps, w.app)
			started, xacts = append(started, w.started), append(xacts, xact)
		}
	}
	if len(pids) == 0 {
		return nil
	}
	err := d.onLockConn(ctx, func(sctx context.Context) error {
		err := d.s.freshStats(sctx)
		if err == nil {
			_, err = d.s.pc.Exec(sctx, d.s.named(drainTerminateSQL), d.s.snapshotFree(pids, apps, started, xacts)...)
		}
		if err != nil {
			return d.terminateError(ctx, sessions, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	for _, ds := range sent {
		ds.Terminated = true
	}
	return nil
}
