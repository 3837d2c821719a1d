package advisory

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// Which sessions a drain waits for: its first listing of the tagged sessions fixes them
// (see drainer.sort), and later listings only see whether they are gone.

// drainListSQL lists the sessions whose application_name carries the lock's tag prefix
// ($1), other than the lock's own, with whose they are (see drainWhoseSQL; $5 the
// WithWorkRoles names) and the backends that hold the lock now: $2, $3, $4 are
// pg_locks' classid, objid and objsubid of the key. A session's usename is visible to
// every role, whatever it may see of the session's state.
const drainListSQL = `SELECT a.pid, a.application_name, coalesce(a.usename::pg_catalog.text, ''),
  coalesce(a.state, ''), a.backend_start, a.xact_start, pg_catalog.statement_timestamp(),
  (SELECT o.query_start FROM pg_catalog.pg_stat_activity o WHERE o.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()),
  current_user::pg_catalog.text, ` + drainWhoseSQL + `,
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

// workSession is one listed session.
type workSession struct {
	pid     uint32
	app     string
	user    string
	state   string             // "" where the drain's role may not see it
	started pgtype.Timestamptz // backend_start; not Valid where not visible
	xact    pgtype.Timestamptz // xact_start; not Valid outside a transaction, or not visible
	whose   string             // see drainWhoseSQL
	pooled  bool               // its tag carries the pooled mark (see pooledMark)
}

// sessionKey tells listed sessions apart across listings: a pid, the session's start,
// and for a pooled tag the transaction it runs (a pooled server connection lives on,
// serving other clients' transactions).
type sessionKey struct {
	pid           uint32
	started, xact int64 // microseconds since the epoch; 0: not visible, or not kept
}

// key is w's sessionKey.
func (w workSession) key() sessionKey {
	k := sessionKey{pid: w.pid}
	if w.started.Valid {
		k.started = w.started.Time.UnixMicro()
	}
	if w.pooled && w.xact.Valid {
		k.xact = w.xact.Time.UnixMicro()
	}
	return k
}

// sort splits a listing: live are the candidates still there; late the sessions with a
// plain tag that appeared after the first listing (terminated at once, never waited
// for). The first listing picks the candidates: every session with a plain tag, and a
// session with a pooled tag only while it runs a transaction that began before this
// holding did (d.cut), or whose state the drain's role may not see: an idle pooled
// server connection, or one running another client's transaction begun since, is not an
// earlier holder's work.
func (d *drainer) sort(listed []workSession) (live, late []workSession) {
	first := d.wait == nil
	if first {
		d.wait = map[sessionKey]struct{}{}
	}
	for _, w := range listed {
		k := w.key()
		switch _, ok := d.wait[k]; {
		case ok:
			live = append(live, w)
		case first && (!w.pooled || w.state == "" || w.xact.Valid && w.xact.Time.Before(d.cut)):
			d.wait[k] = struct{}{}
			live = append(live, w)
		case !first && !w.pooled:
			late = append(late, w)
		}
	}
	return live, late
}

// list returns the sessions of earlier holders, of the roles the drain covers, now, on
// the lock's connection. The first listing sets d.cut, the server's time when this
// holding began: the server's earliest time for this look (its statements' start: the
// session's query_start, or statement_timestamp), less the time this process has seen
// pass since the holding began up to sending the look (its monotonic clock, so no skew
// between the clocks counts). Both server times are after the look was sent, so the cut
// is never before the grant; it is after it by the look's way to the server.
func (d *drainer) list(ctx context.Context) ([]workSession, error) {
	s := d.s
	classid, objid, subid := pgLocksKey(s.key, s.pair)
	var out []workSession
	err := d.onLockConn(ctx, func(sctx context.Context) error {
		s.mu.Lock()
		since := s.heldSince
		s.mu.Unlock()
		issued := time.Now()
		if since.IsZero() {
			since = issued
		}
		err := s.freshStats(sctx)
		var rows pgx.Rows
		if err == nil {
			rows, err = s.pc.Query(sctx, s.named(drainListSQL), s.snapshotFree(d.prefix, classid, objid, subid, s.m.set.workRoles)...)
		}
		if err == nil {
			var holders []int32
			var w workSession
			for rows.Next() {
				var now time.Time
				var began pgtype.Timestamptz
				if err = rows.Scan(&w.pid, &w.app, &w.user, &w.state, &w.started, &w.xact, &now, &began,
					&d.report.Role, &w.whose, &holders); err != nil {
					break
				}
				if d.cut.IsZero() {
					if began.Valid && began.Time.Before(now) {
						now = began.Time
					}
					d.cut = now.Add(-max(issued.Sub(since), 0))
				}
				if d.earlier(&w, holders) && d.covers(w) {
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
// that holds the lock now (shared holders hold it together). It records whether w's tag
// carries the pooled mark.
func (d *drainer) earlier(w *workSession, holders []int32) bool {
	holder, pid, pooled, ok := holderOf(w.app, d.prefix)
	w.pooled = pooled
	if !ok || d.prefix+holder == d.s.workTag() { // the tag is made only if a session is found
		return false
	}
	return pid == d.s.pid || !slices.Contains(holders, int32(pid))
}
