package advisory

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
)

// Whose sessions a drain waits for. A tag is only an application_name, which any role
// that can log in may set, on any database of the cluster. So the drain waits for, and
// terminates, only the tagged sessions an earlier holder can have started:
//
//   - sessions of the drain's own role, or of a role whose privileges it has: exactly the
//     sessions it may terminate without pg_signal_backend (PostgreSQL's rule for
//     pg_terminate_backend, a superuser's sessions excepted), which is where a holder's own
//     work runs: one service, one role;
//   - sessions of the roles named with WithWorkRoles, for work that runs as another role.
//     A missing privilege to terminate one of those is an error, as before (the user said
//     the work runs there).
//
// A tagged session of any other role is ignored: reported (DrainReport.Ignored), logged
// at Warn once per drain, never waited for. A superuser's drain has the privileges of
// every role, so it waits for every tagged session and terminates a forger's at the end
// of the drain wait.

// drainWhoseSQL classifies a listed session (a, its role r; $5 the WithWorkRoles names):
// 'own', 'named', 'superuser' (another role that is a superuser, out of reach) or
// 'other'. Whether the drain's role is a superuser is a scalar subquery, so that a role
// missing from pg_roles makes no row vanish.
const drainWhoseSQL = `CASE
    WHEN coalesce(pg_catalog.pg_has_role(r.oid, 'USAGE') AND (NOT r.rolsuper
      OR (SELECT m.rolsuper FROM pg_catalog.pg_roles m WHERE m.rolname OPERATOR(pg_catalog.=) current_user)), false)
      THEN 'own'
    WHEN a.usename::pg_catalog.text OPERATOR(pg_catalog.=) ANY ($5::pg_catalog.text[]) THEN 'named'
    WHEN coalesce(r.rolsuper, false) THEN 'superuser'
    ELSE 'other' END`

// covers reports whether the drain waits for w, an earlier holding's session; if it does
// not, it records w in the report and logs it, the first time it sees it.
func (d *drainer) covers(w workSession) bool {
	if w.whose == "own" || w.whose == "named" {
		return true
	}
	if _, seen := d.passed[w.pid]; seen {
		return false
	}
	if d.passed == nil {
		d.passed = map[uint32]struct{}{}
	}
	d.passed[w.pid] = struct{}{}
	is := IgnoredSession{PID: w.pid, ApplicationName: w.app, User: w.user, Reason: ignoredReason(w, d.report.Role)}
	d.report.Ignored = append(d.report.Ignored, is)
	d.s.logIgnored(is)
	return false
}

// ignoredReason says why a session that carries the tag is not waited for.
func ignoredReason(w workSession, me string) string {
	switch {
	case w.user == "":
		return "the session has no role"
	case w.whose == "superuser":
		return fmt.Sprintf("its role %q is a superuser, whose sessions only a superuser may terminate, "+
			"and WithWorkRoles does not name it", w.user)
	}
	return fmt.Sprintf("its role %q is neither the drain's role %q nor one whose privileges %q has, "+
		"and WithWorkRoles does not name it", w.user, me, me)
}

// terminateError explains a failed termination; for a missing privilege (a session of a
// role named with WithWorkRoles) it says how to grant it.
func (d *drainer) terminateError(ctx context.Context, live []workSession, err error) error {
	if sqlState(err) == "42501" {
		var who []string
		for _, w := range live {
			who = append(who, fmt.Sprintf("pid %d (role %q)", w.pid, w.user))
		}
		me := d.report.Role
		return fmt.Errorf("%w: %s: role %q may not terminate %s: GRANT pg_signal_backend TO %q "+
			"(only a superuser may terminate a superuser's sessions), or run the work as the holder's role: %w",
			ErrWorkNotDrained, d.s.describe(), me, strings.Join(who, ", "), me, err)
	}
	return fmt.Errorf("advisory: drain %s: terminate earlier holders' sessions: %w", d.s.describe(), withCtxErr(ctx, err))
}

// logDrained reports a drained session at Warn: an earlier holder's work was still
// running when this holding began.
func (p *pin) logDrained(ds DrainedSession) {
	if p.m.set.logger == nil {
		return
	}
	logAttrs(p.m.set.logger, slog.LevelWarn, "advisory: drained an earlier holder's session",
		slog.String("lock", p.describe()), slog.Uint64("pid", uint64(ds.PID)),
		slog.String("application_name", ds.ApplicationName), slog.Bool("terminated", ds.Terminated),
		slog.Duration("after", ds.After))
}

// logIgnored reports at Warn a session that carries the lock's tag and that the drain
// does not wait for: someone set the tag who cannot have worked for a holder, or work
// runs as a role that WithWorkRoles should name.
func (p *pin) logIgnored(is IgnoredSession) {
	if p.m.set.logger == nil {
		return
	}
	logAttrs(p.m.set.logger, slog.LevelWarn, "advisory: ignored a session that carries the lock's work tag",
		slog.String("lock", p.describe()), slog.Uint64("pid", uint64(is.PID)),
		slog.String("application_name", is.ApplicationName), slog.String("role", is.User),
		slog.String("reason", is.Reason))
}
