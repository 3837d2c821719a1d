package advisory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
)

// Work tags. A holding's tag is "pgadv/DB/KEY/PID.NONCE": the database's oid, the key
// (prefixed "p" in the two-int4 form, a key space of its own), the holding backend's pid
// and a random nonce, the numbers in base 36 so that the tag leaves room in the 63 bytes
// of application_name. Everything before the holder part (workPrefix) is the same for
// every holding of one lock; the holder part tells holdings apart, also two holdings on
// one backend (the nonce).

// drainListSQL lists the sessions whose application_name carries the lock's tag prefix
// ($1), other than the lock's own, with whose they are (see drainWhoseSQL; $5 the
// WithWorkRoles names) and the backends that hold the lock now: $2, $3, $4 are
// pg_locks' classid, objid and objsubid of the key. A session's usename is visible to
// every role, whatever it may see of the session's state.
const drainListSQL = `SELECT a.pid, a.application_name, coalesce(a.usename::pg_catalog.text, ''),
  coalesce(a.state, ''), current_user::pg_catalog.text, ` + drainWhoseSQL + `,
  (SELECT coalesce(pg_catalog.array_agg(l.pid), '{}') FROM pg_catalog.pg_locks l
   WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
     AND l.database OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_database
       WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
     AND l.classid OPERATOR(pg_catalog.=) $2 AND l.objid OPERATOR(pg_catalog.=) $3
     AND l.objsubid OPERATOR(pg_catalog.=) $4)
FROM pg_catalog.pg_stat_activity a
  LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.usesysid
WHERE pg_catalog.strpos(a.application_name, $1) OPERATOR(pg_catalog.>) 0
  AND a.pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()`

// drainTerminateSQL terminates each listed backend that still carries the listed
// application_name (a pid the server has given to a new session is left alone).
const drainTerminateSQL = `SELECT pg_catalog.count(pg_catalog.pg_terminate_backend(t.pid))
FROM ROWS FROM (pg_catalog.unnest($1::integer[]), pg_catalog.unnest($2::pg_catalog.text[])) AS t(pid, app)
JOIN pg_catalog.pg_stat_activity a
  ON a.pid OPERATOR(pg_catalog.=) t.pid AND a.application_name OPERATOR(pg_catalog.=) t.app`

// drainPoll is how often a drain looks again while it waits.
const drainPoll = 20 * time.Millisecond

// drainExitBound bounds how long a drain waits for terminated sessions to go.
const drainExitBound = 10 * time.Second

// workSession is one listed session.
type workSession struct {
	pid   uint32
	app   string
	user  string
	state string
	whose string // see drainWhoseSQL
}

// drainer is one Drain in progress.
type drainer struct {
	s      *pin
	prefix string // the lock's tag prefix (see workPrefix)
	start  time.Time
	report DrainReport
	index  map[uint32]int      // pid -> index in report.Sessions
	passed map[uint32]struct{} // pids of the sessions ignored (see drainer.covers)
}

// run lists the earlier holders' sessions until none is left: it waits up to the drain
// wait for them to end on their own, then terminates those left and waits (bounded by
// drainExitBound) for them to go.
func (d *drainer) run(ctx context.Context) error {
	waitUntil := d.start.Add(d.s.m.set.drainWait)
	var exitBy time.Time
	for {
		live, err := d.list(ctx)
		d.report.Took = time.Since(d.start)
		if err != nil {
			return err
		}
		d.note(live)
		if len(live) == 0 {
			return nil
		}
		now := time.Now()
		if !now.Before(waitUntil) {
			if exitBy.IsZero() {
				exitBy = now.Add(drainExitBound)
			} else if now.After(exitBy) {
				return fmt.Errorf("%w: %s: %d earlier holders' sessions still running %v after they were terminated",
					ErrWorkNotDrained, d.s.describe(), len(live), drainExitBound)
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

// list returns the earlier holders' sessions still running, on the lock's connection.
func (d *drainer) list(ctx context.Context) ([]workSession, error) {
	s := d.s
	classid, objid, subid := pgLocksKey(s.key, s.pair)
	var out []workSession
	err := d.onLockConn(ctx, func(sctx context.Context) error {
		err := s.freshStats(sctx)
		var rows pgx.Rows
		if err == nil {
			rows, err = s.pc.Query(sctx, s.named(drainListSQL), s.snapshotFree(d.prefix, classid, objid, subid, s.m.set.workRoles)...)
		}
		if err == nil {
			var holders []int32
			var w workSession
			for rows.Next() {
				if err = rows.Scan(&w.pid, &w.app, &w.user, &w.state, &d.report.Role, &w.whose, &holders); err != nil {
					break
				}
				if d.earlier(w, holders) && d.covers(w) {
					out = append(out, w)
				}
			}
			rows.Close()
			if err == nil {
				err = rows.Err()
			}
		}
		if err != nil {
			return fmt.Errorf("advisory: drain %s: list earlier holders' sessions: %w", s.describe(), withCtxErr(ctx, err))
		}
		return nil
	})
	return out, err
}

// earlier reports whether w works for an earlier holding: not this one, and not another
// that holds the lock now (shared holders hold it together).
func (d *drainer) earlier(w workSession, holders []int32) bool {
	holder, pid, ok := holderOf(w.app, d.prefix)
	if !ok || d.prefix+holder == d.s.workTag() { // the tag is made only if a session is found
		return false
	}
	return pid == d.s.pid || !slices.Contains(holders, int32(pid))
}

// freshStats makes the next statement on the lock's connection read pg_stat_activity as
// it is now. Inside a transaction (a transaction holding's: see holding_tx.go) the server
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
func (d *drainer) note(live []workSession) {
	now := time.Since(d.start)
	for _, w := range live {
		if _, seen := d.index[w.pid]; !seen {
			d.index[w.pid] = len(d.report.Sessions)
			d.report.Sessions = append(d.report.Sessions, DrainedSession{PID: w.pid, ApplicationName: w.app,
				User: w.user, State: w.state})
		}
	}
	for i := range d.report.Sessions {
		ds := &d.report.Sessions[i]
		if ds.After == 0 && !slices.ContainsFunc(live, func(w workSession) bool { return w.pid == ds.PID }) {
			ds.After = max(now, time.Nanosecond)
			d.s.logDrained(*ds)
		}
	}
}

// terminate terminates the listed sessions not terminated yet.
func (d *drainer) terminate(ctx context.Context, live []workSession) error {
	var pids []int32
	var apps []string
	var sent []*DrainedSession // marked Terminated once the statement succeeded
	for _, w := range live {
		if ds := &d.report.Sessions[d.index[w.pid]]; !ds.Terminated {
			sent = append(sent, ds)
			pids, apps = append(pids, int32(w.pid)), append(apps, w.app)
		}
	}
	if len(pids) == 0 {
		return nil
	}
	err := d.onLockConn(ctx, func(sctx context.Context) error {
		err := d.s.freshStats(sctx)
		if err == nil {
			_, err = d.s.pc.Exec(sctx, d.s.named(drainTerminateSQL), d.s.snapshotFree(pids, apps)...)
		}
		if err != nil {
			return d.terminateError(ctx, live, err)
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
