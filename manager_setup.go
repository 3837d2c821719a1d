package advisory

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory/internal/sockfd"
)

// ownerSetting is the custom setting in which a lock connection's backend keeps the
// connection's ownership token (see ownedBy).
const ownerSetting = "advisory.owner"

// lookSQL runs first on every new connection, before anything is changed on the server:
// whose backend this is, whether it is a standby, whether another client already left a
// token on it, the two ends of the TCP connection as the backend sees them (empty
// and 0 over a Unix socket; see directPath), the database's oid (for work tags, see
// workTag), and a primary's timeline (see proxyState.noteTimeline).
const lookSQL = "SELECT pg_catalog.pg_backend_pid(), pg_catalog.pg_is_in_recovery(), " +
	"coalesce(pg_catalog.current_setting('" + ownerSetting + "', true), ''), " +
	"coalesce(pg_catalog.host(pg_catalog.inet_client_addr()), ''), coalesce(pg_catalog.inet_client_port(), 0), " +
	"coalesce(pg_catalog.host(pg_catalog.inet_server_addr()), ''), coalesce(pg_catalog.inet_server_port(), 0), " +
	"(SELECT oid FROM pg_catalog.pg_database WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database()), " +
	"CASE WHEN pg_catalog.pg_is_in_recovery() THEN 0 ELSE " + timelineSQL + " END"

// setUp prepares a new pool connection for locking. It refuses a standby. Before it
// changes any setting on the server (which would leak to other clients of a shared
// backend), it looks for signs that the backend is shared: another lock connection's
// token on it, or, behind a proxy, the probe's (see probe). Behind a transaction pooler
// (a sign found now or by an earlier connection) it changes nothing on the server (see
// txPooledConn), or fails if the Manager holds session-level locks (see
// proxyState.sharing). Otherwise it stores a fresh ownership token and, on a direct
// connection, the session settings.
func setUp(ctx context.Context, conn *pgx.Conn, set *settings, ps *proxyState) error {
	pg := conn.PgConn()
	reported := pg.ParameterStatus("server_version")
	version, err := checkVersion(reported)
	if err != nil {
		return err
	}
	seen, err := lookAt(ctx, pg, reported)
	if err != nil {
		return err
	}
	if err := ps.noteTimeline(seen.timeline); err != nil {
		return err
	}
	var settings [][2]string
	switch {
	case seen.pid == pg.PID():
		if seen.prev != "" {
			return fmt.Errorf("%w: the new connection's backend (pid %d) already carries another lock "+
				"connection's ownership token: a proxy hands one server connection to several clients", ErrPooler, seen.pid)
		}
		settings = serverSettings(set, version)
	case ps.txPooled.Load():
		txPooledConn(pg, seen) // known from the Manager's first connection: nothing to probe
		return nil
	case seen.prev != "":
		// Another lock connection's token on the backend this client was just given: the
		// proxy shares backends between clients.
		return ps.sharing(pg, seen, fmt.Sprintf("the new connection's backend (pid %d) already carries "+
			"another lock connection's ownership token", seen.pid))
	default:
		// A proxy is in the path. A probe can show that a transaction pooler shares
		// backends, never prove that one does not, so nothing that other clients of a
		// shared backend would inherit is changed: keepalive and
		// client_connection_check_interval would only configure the proxy's server
		// connection anyway. Only the token is set, which makes any sharing with another
		// of our connections visible (see lookAt), and which New takes back if its
		// self-test finds sharing after all (see openPool).
		shared, err := probe(ctx, conn, seen.pid, ps.blind)
		switch {
		case err != nil:
			return err
		case shared:
			return ps.sharing(pg, seen, fmt.Sprintf("two client connections reached the same backend (pid %d)", seen.pid))
		}
		ps.noteProxy()
	}
	return stamp(ctx, pg, settings, seen, set, ps, reported)
}

// stamp is setUp's last step on a connection that may lock: it applies the session
// settings and a fresh ownership token, and records what setUp found in its CustomData.
func stamp(ctx context.Context, pg *pgconn.PgConn, kv [][2]string, seen look, set *settings,
	ps *proxyState, reported string) error {
	token := newToken()
	if err := apply(ctx, pg, append(kv, [2]string{ownerSetting, token}), seen.pid, reported); err != nil {
		if errors.Is(err, errNotApplied) && seen.pid != pg.PID() {
			return ps.sharing(pg, seen, fmt.Sprintf("the connection's setup statement did not run on its "+
				"backend (pid %d), or found another client's token there; it changed nothing", seen.pid))
		}
		return err
	}
	pg.CustomData()[backendPIDKey] = seen.pid
	pg.CustomData()[tokenKey] = token
	pg.CustomData()[fdKey] = sockfd.FD(pg.Conn())
	pg.CustomData()[dbOIDKey] = seen.dbOID
	if seen.pid == pg.PID() {
		notePath(pg, seen, set, ps)
	}
	return nil
}

// notePath records what a connection whose startup named its own backend found about
// its path. One that goes straight to its backend is marked direct (see isDirect). One
// over TCP that does not is spliced by a TCP proxy (HAProxy in front of a Patroni
// cluster, a userland port forwarder) or translated: the proxy passes the server's
// BackendKeyData through, so only the two views of the connection's ends tell it, and
// the client's keepalives may reach only the proxy, which answers them (see
// checkHeartbeat).
func notePath(pg *pgconn.PgConn, seen look, set *settings, ps *proxyState) {
	switch direct := seen.directPath(pg.Conn()); {
	case direct && !set.checkedOnly:
		pg.CustomData()[directKey] = true
	case !direct && pg.Conn().LocalAddr().Network() == "tcp":
		ps.noteSpliced()
	}
}

// txPooledConn records what the set-up of a connection through a transaction pooler found.
// Nothing is set on the server: each of its transactions may run on another server
// session, shared with other clients, and the pid of a holding's is learnt from its lock
// statement (see txStatements). The pid recorded is 0 until then.
func txPooledConn(pg *pgconn.PgConn, seen look) {
	pg.CustomData()[backendPIDKey] = uint32(0)
	pg.CustomData()[fdKey] = sockfd.FD(pg.Conn())
	pg.CustomData()[dbOIDKey] = seen.dbOID
}

// lookAt runs lookSQL on a new connection, before anything is changed on the server, and
// refuses a standby.
func lookAt(ctx context.Context, pg *pgconn.PgConn, reported string) (look, error) {
	rows, err := pg.Exec(ctx, lookSQL).ReadAll()
	if err != nil {
		return look{}, setupError(err, reported)
	}
	seen, err := parseLook(rows)
	switch {
	case err != nil:
		return look{}, err
	case seen.standby:
		return look{}, fmt.Errorf("%w: the server is in recovery (pg_is_in_recovery()): a lock taken there would be "+
			"local to it, not shared with the primary's sessions; connect to the primary (target_session_attrs=read-write)",
			ErrStandby)
	}
	return seen, nil
}

// errNotApplied: the settings statement ran on another backend than the connection's, or
// found another client's token there (see applySQL).
var errNotApplied = fmt.Errorf("%w: the connection's setup statement did not run on its backend, "+
	"or found another client's token there; it changed nothing", ErrPooler)

// apply stores settings on the backend pid in one statement (see applySQL), or fails
// with errNotApplied if the statement ran on another backend or found a token there. A
// statement that ran on a standby is no sign of sharing: a load balancer sent it there
// (Pgpool-II sends lookSQL, which reads a system catalog, to the primary, and a statement
// that reads none and calls no function it counts as a write to the session's
// load-balance node), so this connection's lock statements would go there too: it
// fails with ErrStandby.
func apply(ctx context.Context, pg *pgconn.PgConn, settings [][2]string, pid uint32, reported string) error {
	rows, err := pg.Exec(ctx, applySQL(settings, pid)).ReadAll()
	if err != nil {
		return setupError(err, reported)
	}
	row, err := onlyRow(rows, 2, "the settings statement")
	if err != nil {
		return err
	}
	got, err := parseUint32(row[0], "the settings statement")
	switch {
	case err == nil && string(row[1]) == "t":
		return fmt.Errorf("%w: the connection's set-up statement ran on a server in recovery: a load balancer in "+
			"the path (Pgpool-II with load_balance_mode?) sends this connection's statements to a standby, where "+
			"locks are local to it; connect to the primary, or have the load balancer send this client's statements "+
			"there (Pgpool-II: app_name_redirect_preference_list, see docs/guarantees.md)", ErrStandby)
	case err != nil || got != uint32(len(settings)):
		return fmt.Errorf("%w (pid %d)", errNotApplied, pid)
	}
	return nil
}

// look is what lookSQL found: the backend, and the TCP connection as the backend sees it.
type look struct {
	pid                    uint32
	standby                bool
	prev                   string // a token another connection left on the backend, or ""
	clientAddr, serverAddr string // "" over a Unix socket
	clientPort, serverPort uint32 // 0 over a Unix socket
	dbOID                  uint32 // the database's oid
	timeline               uint32 // a primary's timeline (0 on a standby)
}

// directPath reports whether the backend's end of the connection is the very socket this
// client connected. Over TCP: the backend sees as its client our socket's local address
// and port, and as its own address the one we connected to; every proxy, pooler or
// address translation between client and server makes the two views differ (the server
// sees the proxy's connection, from the proxy's address and port). Over a Unix socket
// (the server sees no address there): the process that listens on the socket we
// connected to (SO_PEERCRED) is the parent of the backend, that is, the postmaster that
// forked it, not a pooler's process (see sockfd.ListenerIsParent). On such a connection no other
// client's statements can ever run on the backend, nor ours on another's, so the lock
// statements need not check the ownership token (see statementsFor): a direct connection
// spares the server that work on every statement. Every other connection keeps the check.
func (l look) directPath(c net.Conn) bool {
	if c.LocalAddr().Network() == "unix" {
		return l.clientAddr == "" && l.clientPort == 0 && sockfd.ListenerIsParent(c, l.pid)
	}
	local, ok1 := c.LocalAddr().(*net.TCPAddr)
	remote, ok2 := c.RemoteAddr().(*net.TCPAddr)
	if !ok1 || !ok2 || l.clientPort == 0 || l.serverPort == 0 {
		return false
	}
	return sameEnd(local, l.clientAddr, l.clientPort) && sameEnd(remote, l.serverAddr, l.serverPort)
}

// sameEnd reports whether a TCP address equals the address and port the server reported
// (an IPv4 address may come back IPv4-mapped from a dual-stack listener).
func sameEnd(a *net.TCPAddr, host string, port uint32) bool {
	ip, ok := netip.AddrFromSlice(a.IP)
	if !ok || a.Zone != "" {
		return false
	}
	theirs, err := netip.ParseAddr(host)
	return err == nil && theirs.Zone() == "" && ip.Unmap() == theirs.Unmap() && uint32(a.Port) == port
}

// applySQL is the statement that applies the session settings: one set_config per row,
// only if the statement runs on the backend pid that the connection looked at, and only
// while no ownership token is there. A statement that a pooler sends to another backend
// changes nothing there. The token comes last: the condition is evaluated for each row in
// turn, and must still find the slot empty for every setting before it. It returns the
// number of settings applied, and whether it ran on a standby (see apply). Names and
// values are the library's own (digits, and the hex token): no quoting is needed.
func applySQL(settings [][2]string, pid uint32) string {
	var b strings.Builder
	b.WriteString("SELECT pg_catalog.count(pg_catalog.set_config(name, value, false)), " + inRecovery + " FROM (VALUES ")
	for i, kv := range settings {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString("('" + kv[0] + "', '" + kv[1] + "')")
	}
	b.WriteString(") AS s(name, value) WHERE pg_catalog.pg_backend_pid() OPERATOR(pg_catalog.=) " +
		strconv.FormatUint(uint64(pid), 10) + " AND coalesce(pg_catalog.current_setting('" + ownerSetting +
		"', true), '') OPERATOR(pg_catalog.=) ''")
	return b.String()
}

// parseLook reads lookSQL's one row.
func parseLook(rows []*pgconn.Result) (look, error) {
	row, err := onlyRow(rows, 9, lookSQL)
	if err != nil {
		return look{}, err
	}
	l := look{standby: string(row[1]) == "t", prev: string(row[2]), clientAddr: string(row[3]), serverAddr: string(row[5])}
	if l.pid, err = parseUint32(row[0], "pg_backend_pid()"); err != nil {
		return look{}, err
	}
	if l.clientPort, err = parseUint32(row[4], "inet_client_port()"); err != nil {
		return look{}, err
	}
	if l.serverPort, err = parseUint32(row[6], "inet_server_port()"); err != nil {
		return look{}, err
	}
	if l.dbOID, err = parseUint32(row[7], "the database's oid"); err != nil {
		return look{}, err
	}
	if l.timeline, err = parseUint32(row[8], "the timeline"); err != nil {
		return look{}, err
	}
	return l, nil
}

// oneNumber reads the single number that a one-statement query returned.
func oneNumber(rows []*pgconn.Result, what string) (uint32, error) {
	row, err := onlyRow(rows, 1, what)
	if err != nil {
		return 0, err
	}
	return parseUint32(row[0], what)
}

// onlyRow returns the one row of cols columns that a one-statement query returned.
func onlyRow(rows []*pgconn.Result, cols int, what string) ([][]byte, error) {
	if len(rows) != 1 || len(rows[0].Rows) != 1 || len(rows[0].Rows[0]) != cols {
		return nil, fmt.Errorf("advisory: set up lock session: unexpected answer to %s", what)
	}
	return rows[0].Rows[0], nil
}

func parseUint32(field []byte, what string) (uint32, error) {
	n, err := strconv.ParseUint(string(field), 10, 32)
	if err != nil {
		return 0, fmt.Errorf("advisory: set up lock session: %s: %w", what, err)
	}
	return uint32(n), nil
}

// newToken returns 128 random bits in hex: safe to write into SQL text as it is.
func newToken() string {
	var b [16]byte
	rand.Read(b[:]) // never fails (crypto/rand)
	return hex.EncodeToString(b[:])
}
