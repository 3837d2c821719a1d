package advisory

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// The work of a holding: the lock is one session, but what it protects (a migration, a
// job) usually runs on other sessions, opened by the holder's own code or by a command it
// started. Those sessions outlive a holder that dies or is cut off: a backend notices that
// its client vanished only when it next reads from or writes to the socket, so a dead
// holder's migration can commit after the next holder has started its own. Two parts close
// that gap:
//
//   - the work's connections carry the holding's tag in their application_name (WorkEnv,
//     WorkConnString, WorkConfig), with server settings that make a backend notice a dead
//     client (client_connection_check_interval, TCP keepalive);
//   - the next holder drains them ([Lock.Drain]; Do, DoTx, TryDo and Lead do it before fn
//     runs): it waits a bounded time for tagged sessions of earlier holders to end, then
//     terminates them, and waits until they are gone.
//
// See docs/guarantees.md, "Work fencing".

// WorkAppName returns the application_name for a connection that does this holding's
// work: the holding's tag, then a space and base (the name the program would use
// otherwise; "" for none), cut to PostgreSQL's 63 bytes at a character boundary. The tag
// comes first so that the cut never reaches it. It does not block.
func (l *Lock) WorkAppName(base string) string { return l.workName(base, false) }

// workName is WorkAppName, with the pooled mark (see pooledMark) after the tag if pooled.
func (l *Lock) workName(base string, pooled bool) string {
	name := l.on.workTag()
	if pooled {
		name += pooledMark
	}
	if base == "" {
		return name
	}
	name += " " + base
	if len(name) > maxAppName {
		name = strings.ToValidUTF8(name[:maxAppName], "")
	}
	return name
}

// maxAppName is PostgreSQL's limit on application_name (NAMEDATALEN - 1).
const maxAppName = 63

// WorkOptions returns the server settings for a connection that does this holding's work,
// in the form of libpq's options parameter and PGOPTIONS ("-c name=value ..."):
// client_connection_check_interval (PostgreSQL 14+) and the Manager's server-side TCP
// keepalive, so that the backend of a holder that died or was cut off stops within the
// bounds of docs/keepalive.md even in the middle of a statement. It returns "" when the
// lock's connection goes through a proxy, which (as PgBouncer does) may refuse the
// parameter. These are the values for the lock's own server: [Lock.WorkConnString] and
// [Lock.WorkEnv] pass them on only to connections aimed at the lock's own address, and
// [Lock.WorkConfig] sets them after connecting where the work connection reaches its
// server directly (see docs/work.md). It does not block.
func (l *Lock) WorkOptions() string {
	s := l.s
	if s.pid != s.pg.PID() {
		return ""
	}
	var b strings.Builder
	for _, kv := range workSettings(&s.m.set, serverVersion(s.pg.ParameterStatus("server_version"))) {
		if b.Len() > 0 {
			b.WriteByte(' ')
		}
		b.WriteString("-c " + kv[0] + "=" + kv[1])
	}
	return b.String()
}

// withOptions puts ours before the caller's options, so that a setting the caller chose
// wins (the server applies -c settings in order).
func withOptions(ours, theirs string) string {
	switch {
	case ours == "":
		return theirs
	case theirs == "":
		return ours
	}
	return ours + " " + theirs
}

// WorkEnv returns a copy of environ (as os.Environ returns it) for a command that does
// this holding's work through libpq or pgx, which read PGAPPNAME and PGOPTIONS: PGAPPNAME
// becomes [Lock.WorkAppName] of the PGAPPNAME in environ (with the pooled mark on the
// terms of [Lock.WorkConnString], for environ's server), and PGOPTIONS starts with
// [Lock.WorkOptions] (only if the server environ names, DATABASE_URL's if it is set, else
// the PG* variables', is at the lock's own address: elsewhere a pooler may refuse them),
// followed by the PGOPTIONS in environ. A connection string that sets application_name
// itself overrides PGAPPNAME: give such a tool [Lock.WorkConnString]. It does not block.
func (l *Lock) WorkEnv(environ []string) []string {
	var app, opts string
	out := make([]string, 0, len(environ)+2)
	for _, kv := range environ {
		switch {
		case strings.HasPrefix(kv, "PGAPPNAME="):
			app = kv[len("PGAPPNAME="):]
		case strings.HasPrefix(kv, "PGOPTIONS="):
			opts = kv[len("PGOPTIONS="):]
		default:
			out = append(out, kv)
		}
	}
	target := envTarget(environ)
	out = append(out, "PGAPPNAME="+l.workName(app, !l.directAt(target)))
	if o := withOptions(l.optionsFor(target), opts); o != "" {
		out = append(out, "PGOPTIONS="+o)
	}
	return out
}

// WorkConnString returns connString (a URL or keyword/value connection string) with
// application_name set to [Lock.WorkAppName] of its own (or PGAPPNAME's), the tag with
// the pooled mark unless connString aims at the lock's own address and the lock reaches
// its server there directly or holds by session (elsewhere it may be a transaction
// pooler, where the tag outlives the work: see docs/work.md), and, if it aims
// at the lock's own address (the Manager's hosts and ports), options starting with
// [Lock.WorkOptions], for a tool that takes a connection string (database/sql drivers,
// migration tools). Aimed elsewhere (a pooler, say, which may refuse options) it gets no
// options of ours. Everything else in it is kept. It does not block. A string that cannot
// be parsed returns an error wrapping [ErrInvalidOption] that never contains its password.
func (l *Lock) WorkConnString(connString string) (string, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return "", parseError(connString, err)
	}
	app := l.workName(cfg.RuntimeParams["application_name"], !l.directAt(cfg))
	opts := withOptions(l.optionsFor(cfg), cfg.RuntimeParams["options"])
	if strings.HasPrefix(connString, "postgres://") || strings.HasPrefix(connString, "postgresql://") {
		return urlWith(connString, app, opts), nil
	}
	// In keyword/value form a later keyword overrides an earlier one (libpq and pgx).
	out := strings.TrimSpace(connString) + " application_name=" + quoteValue(app)
	if opts != "" {
		out += " options=" + quoteValue(opts)
	}
	return strings.TrimSpace(out), nil
}

// urlWith returns the URL u with application_name and options (if not "") set: their
// old values are dropped, every other parameter is kept byte for byte, and a space is
// encoded as %20, since libpq does not decode '+' in a URL.
func urlWith(u, app, opts string) string {
	base, query, _ := strings.Cut(u, "?")
	var params []string
	for _, kv := range strings.Split(query, "&") {
		k, _, _ := strings.Cut(kv, "=")
		if name, err := url.QueryUnescape(k); kv == "" || err == nil && (name == "application_name" || name == "options" && opts != "") {
			continue
		}
		params = append(params, kv)
	}
	params = append(params, "application_name="+queryEscape(app))
	if opts != "" {
		params = append(params, "options="+queryEscape(opts))
	}
	return base + "?" + strings.Join(params, "&")
}

func queryEscape(s string) string { return strings.ReplaceAll(url.QueryEscape(s), "+", "%20") }

// quoteValue quotes a keyword/value connection string value.
func quoteValue(v string) string {
	return "'" + strings.NewReplacer(`\`, `\\`, `'`, `\'`).Replace(v) + "'"
}

// WorkConfig sets cfg up for connections that do this holding's work: its
// application_name becomes [Lock.WorkAppName] of its own with the pooled mark, which a
// connection that reaches its backend directly drops once connected (see docs/work.md),
// and a connection opened after
// the lock has ended fails (with an error wrapping the lock's end, [ErrLockLost] or
// [ErrNotHeld]), so that no new work starts for a holding that is over. Each new
// connection asks the server, on its own session, whether the lock's session still holds
// the lock (one round trip): a loss this process has not heard of yet refuses it too, as
// does a server other than the lock's. The same round trip gives the session the
// settings of [Lock.WorkOptions] (for its own server's version), those cfg's own options
// did not set, if the connection reaches its backend directly; through a pooler it gets
// none (a session setting would reach other clients). cfg's options are left as they are.
// For a pgxpool, pass &poolConfig.ConnConfig.Config before creating the pool. It panics
// if cfg is nil; it does not block.
func (l *Lock) WorkConfig(cfg *pgconn.Config) {
	if cfg == nil {
		panic("advisory: WorkConfig with a nil config")
	}
	if cfg.RuntimeParams == nil {
		cfg.RuntimeParams = map[string]string{}
	}
	cfg.RuntimeParams["application_name"] = l.workName(cfg.RuntimeParams["application_name"], true)
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, pg *pgconn.PgConn) error {
		// The server first, then this process (see heldOnServer); the Lock's own end, if
		// it has one, says more than the server's answer.
		err := l.s.heldOnServerTagged(ctx, pg, l.Key(), l.pairForm(), l.workName("", false))
		if lerr := l.Err(); lerr != nil {
			err = lerr
		}
		if err != nil {
			return fmt.Errorf("advisory: no new work connection for %s: %w", describe(l.Key(), l.name, l.pairForm()), err)
		}
		if next != nil {
			return next(ctx, pg)
		}
		return nil
	}
}

// Drain makes sure that no server session that worked for an earlier holder of the lock is
// still running: it finds the sessions tagged for another holding (see
// [Lock.WorkAppName]; shared co-holders that hold the lock now are spared) whose role is
// one it covers (its own, one whose privileges it has, one named by [WithWorkRoles]) and
// that are there when it begins (with a tag for work that may go through a transaction
// pooler: only while they run a transaction begun before the grant), waits up to
// [WithDrainWait] for them to end, terminates the rest and waits until they are gone.
// Tagged sessions that appear meanwhile are terminated without waiting for them (or,
// with such a pooled tag, left alone). Tagged sessions of other roles are reported as
// Ignored, never waited for. See docs/work.md for what it guarantees behind each kind of
// pooler.
// [Manager.Do], DoTx, TryDo and Lead call it before fn; after [Manager.Lock], call it
// before starting the work.
//
// It blocks for one statement when nothing is found, else for the wait and up to 10 s
// more. ctx is checked between statements and while waiting, never interrupting one. The
// lock is kept whatever happens; the report lists what was found, also on error. An error
// wraps [ErrWorkNotDrained] (no privilege to terminate a WithWorkRoles role's session: the
// text names the grant; or a session there when the drain began did not go in time),
// ctx's error, or the lock's end:
// then do not start the work. A re-entered Lock drains for its holding, and spares the
// holding's own work; while a BeginFunc of the holding runs fn it fails at once with
// [ErrNotReentrant].
func (l *Lock) Drain(ctx context.Context) (DrainReport, error) {
	s, err := l.own("drain the work of", true)
	if err != nil {
		return DrainReport{}, err
	}
	d := &drainer{s: s, prefix: s.workPrefix(), start: time.Now(), index: map[sessionKey]int{}}
	err = d.run(ctx)
	return d.report, err
}

// A DrainReport says what [Lock.Drain] found and did.
type DrainReport struct {
	// Sessions are the earlier holders' sessions the drain waited for, and those it
	// terminated without waiting (they appeared after it began), in the order it first
	// saw them.
	Sessions []DrainedSession
	// Ignored are the sessions that carry the lock's tag but whose role the drain does
	// not cover (see [WithWorkRoles]): not waited for, not terminated, in the order first
	// seen. Anyone who can log in can set an application_name.
	Ignored []IgnoredSession
	// Role is the role the drain ran as (current_user on the lock's connection); "" if it
	// ran no statement.
	Role string
	// Took is how long the drain took, from its start to its last statement.
	Took time.Duration
}

// A DrainedSession is one server session of an earlier holder's work that [Lock.Drain]
// found running.
type DrainedSession struct {
	PID uint32
	// ApplicationName carries the earlier holding's tag (see [Lock.WorkAppName]). It is
	// the text of another program: escape it before printing it to a terminal.
	ApplicationName string
	// User and State ("active", "idle in transaction", ...) are as pg_stat_activity showed
	// them first; empty where the caller's role may not see them.
	User, State string
	// Terminated reports that the drain terminated the session (pg_terminate_backend);
	// false: it ended on its own.
	Terminated bool
	// After is how long after the drain began the session was seen gone; 0 for a session
	// that appeared after the drain began (terminated without waiting) and was not seen
	// again before the drain ended.
	After time.Duration
}

// An IgnoredSession is a session that carries the lock's work tag and that [Lock.Drain]
// did not wait for, because of its role.
type IgnoredSession struct {
	PID uint32
	// ApplicationName and User (the session's role) are as pg_stat_activity showed them:
	// text chosen by whoever connected, to escape before printing to a terminal.
	ApplicationName, User string
	// Reason says why the drain did not cover the session's role, in words.
	Reason string
}
