package advisory

import (
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Where the work's server settings (see WorkOptions) go. They make a dead holder's work
// backend stop mid-statement; they are a speed-up of the drain, never its safety (the
// drain terminates what does not stop on its own). So they go only where they are known
// to be taken, decided from the work's own connection, never from the lock's:
//
//   - WorkConfig sets them after connecting, with set_config on the work connection's own
//     session, and only if that connection reaches its backend directly: the backend's pid
//     is the one its startup announced (the Manager's rule for its own connections, see
//     setUp). Behind a pooler a session setting would reach other clients; a startup
//     parameter is refused (PgBouncer: "unsupported startup parameter: options").
//   - A connection string (WorkConnString) and an environment (WorkEnv) cannot ask: they
//     get the options startup parameter only if they aim at the lock's own address (the
//     same hosts and ports as the Manager's connection string) and the lock's connection
//     reached its backend directly there. Anywhere else nothing can tell a server from a
//     proxy without connecting, and they get none.

// optionsFor returns WorkOptions for a connection to cfg's address, or "" unless cfg aims
// at the Manager's own address (see above).
func (l *Lock) optionsFor(cfg *pgconn.Config) string {
	opts := l.WorkOptions()
	if opts == "" || !l.ownAddress(cfg) {
		return ""
	}
	return opts
}

// ownAddress reports whether cfg (nil: unknown) aims at the Manager's own address: every
// host and port it tries is one the Manager's connection string names.
func (l *Lock) ownAddress(cfg *pgconn.Config) bool {
	if cfg == nil {
		return false
	}
	own := addresses(&l.s.m.pool.Config().ConnConfig.Config)
	for _, a := range addresses(cfg) {
		if !slices.Contains(own, a) {
			return false
		}
	}
	return true
}

// directAt reports whether work connecting to cfg's address keeps one server session for
// its whole life, as far as the lock's own connection shows: cfg aims at the Manager's
// own address, and the lock's connection there reaches its backend directly, or through
// a proxy on which the lock is held by session (which a transaction pooler cannot hold).
// Such work gets the plain tag; any other gets the pooled mark (see pooledMark): it may
// go through a transaction pooler, and nothing can tell without connecting.
func (l *Lock) directAt(cfg *pgconn.Config) bool {
	s := l.s
	if !l.ownAddress(cfg) {
		return false
	}
	return s.pid == s.pg.PID() || s.lease.kind() == HoldingSession && !s.m.proxy.txPooled.Load()
}

// addresses lists the host:port pairs a config tries (its fallbacks included).
func addresses(cfg *pgconn.Config) []string {
	out := []string{net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))}
	for _, fb := range cfg.Fallbacks {
		out = append(out, net.JoinHostPort(fb.Host, strconv.Itoa(int(fb.Port))))
	}
	return out
}

// envTarget returns the config of the server that a command run with environ connects to
// as far as environ says: DATABASE_URL's if environ sets it, else libpq's PG* variables';
// nil if that cannot be parsed.
func envTarget(environ []string) *pgconn.Config {
	get := func(name string) (string, bool) {
		for i := len(environ) - 1; i >= 0; i-- { // the last one wins, as with exec
			if v, ok := strings.CutPrefix(environ[i], name+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	conn := ""
	if u, ok := get("DATABASE_URL"); ok && u != "" {
		conn = u
	} else {
		for _, kw := range [][2]string{{"host", "PGHOST"}, {"port", "PGPORT"}, {"hostaddr", "PGHOSTADDR"}} {
			if v, ok := get(kw[1]); ok && v != "" {
				conn += " " + kw[0] + "=" + quoteValue(v)
			}
		}
	}
	cfg, err := pgconn.ParseConfig(conn)
	if err != nil {
		return nil
	}
	return cfg
}

// workSetSQL is a select-list item that sets settings on the session that runs it, with
// set_config for the session, those the client has not set at startup (pg_settings'
// source "client": the caller's own options win) and the server has, only if the
// session's backend is pid (the connection reaches it directly: see above). Its value is
// how many it set. Names and values are the library's own (see workSettings).
func workSetSQL(settings [][2]string, pid uint32) string {
	var values []string
	for _, kv := range settings {
		values = append(values, "('"+kv[0]+"', '"+kv[1]+"')")
	}
	return `(SELECT pg_catalog.count(pg_catalog.set_config(v.n, v.val, false))
  FROM (VALUES ` + strings.Join(values, ", ") + `) AS v(n, val)
  JOIN pg_catalog.pg_settings s ON s.name OPERATOR(pg_catalog.=) v.n
  WHERE s.source OPERATOR(pg_catalog.<>) 'client'
    AND pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.=) ` + strconv.FormatUint(uint64(pid), 10) + `)`
}
