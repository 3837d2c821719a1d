package advisory

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/pgadvisory/advisory/internal/sockfd"
)

// TCPKeepalive configures TCP keepalive on one end of a lock connection. A silent peer
// (host gone, network partitioned) is declared dead after about Idle + Interval*Count
// without a reply, or after UserTimeout with data unacknowledged.
//
// Idle and Interval must be whole seconds (the kernel counts in seconds) from 1s to
// 32767s; Count from 1 to 127; UserTimeout, if set, a whole number of milliseconds of at
// least Idle+Interval. The zero UserTimeout means Idle + Interval*Count.
type TCPKeepalive struct {
	Idle        time.Duration // silence before the first probe
	Interval    time.Duration // time between unanswered probes
	Count       int           // unanswered probes before the connection is dropped
	UserTimeout time.Duration // TCP_USER_TIMEOUT / tcp_user_timeout; 0 means Idle + Interval*Count
}

// Defaults: the holder is told of a silent partition within 10 s; the server cannot free
// the lock sooner than 20 s after the partition, and frees it within 30 s.
var (
	defaultClientKeepalive = TCPKeepalive{Idle: 4 * time.Second, Interval: 2 * time.Second, Count: 3}
	defaultServerKeepalive = TCPKeepalive{Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 4}
)

const (
	defaultConnCheckInterval = time.Second
	defaultMinMargin         = 5 * time.Second
)

func (k TCPKeepalive) userTimeout() time.Duration {
	if k.UserTimeout == 0 {
		return k.Idle + k.Interval*time.Duration(k.Count)
	}
	return k.UserTimeout
}

// abortAfter is when Linux aborts a silent connection, counted from the last segment
// received: with TCP_USER_TIMEOUT set the probe count is ignored and the connection is
// dropped at the first probe tick (Idle, Idle+Interval, ...) at or after the user timeout.
func (k TCPKeepalive) abortAfter() time.Duration {
	u := k.userTimeout()
	t := k.Idle + k.Interval
	for t < u {
		t += k.Interval
	}
	return t
}

// validate checks k as the keepalive of side ("client" or "server"), in the words
// of the option that set it.
func (k TCPKeepalive) validate(side string) error {
	secs := func(name string, d time.Duration) error {
		if d < time.Second || d > 32767*time.Second || d%time.Second != 0 {
			return fmt.Errorf("%w: %s keepalive %s is %v; want whole seconds from 1s to 32767s",
				ErrInvalidOption, side, name, d)
		}
		return nil
	}
	if err := secs("idle", k.Idle); err != nil {
		return err
	}
	if err := secs("interval", k.Interval); err != nil {
		return err
	}
	if k.Count < 1 || k.Count > 127 {
		return fmt.Errorf("%w: %s keepalive count is %d; want 1 to 127", ErrInvalidOption, side, k.Count)
	}
	if k.UserTimeout != 0 && (k.UserTimeout < k.Idle+k.Interval || k.UserTimeout%time.Millisecond != 0 ||
		k.UserTimeout > 24*time.Hour) {
		return fmt.Errorf("%w: %s TCP user timeout is %v; want whole milliseconds from idle+interval (%v) to 24h",
			ErrInvalidOption, side, k.UserTimeout, k.Idle+k.Interval)
	}
	return nil
}

// Bounds are the loss-detection timings that keepalive settings imply, counted from the
// moment a network path goes silent. [Manager.Bounds] reports them; New refuses settings
// where Margin is below the minimum (see [WithMinMargin]).
type Bounds struct {
	// HolderTold is the latest the holder's Done channel closes: the client's keepalive
	// abort time (or its TCP user timeout, if longer).
	HolderTold time.Duration
	// ServerFreesAfter is the earliest the server can free the lock. The server's keepalive
	// timer may already have run for up to its Idle when the path goes silent, so only its
	// probing phase is certain: abortAfter - Idle, or its user timeout if shorter.
	ServerFreesAfter time.Duration
	// ServerFreesBy is the latest the server frees the lock.
	ServerFreesBy time.Duration
	// Margin is ServerFreesAfter - HolderTold: the time the old holder has, at worst, to
	// stop before a new holder can start.
	Margin time.Duration
	// Proxied is true when the Manager's connections go through a proxy (PgBouncer or
	// another pooler in session mode, a TCP proxy): the lock is then held by the proxy's
	// connection to the server, and ServerFreesAfter and ServerFreesBy bound only that
	// connection. How long a cut-off holder's lock stays depends on the proxy's own
	// keepalive toward its clients (PgBouncer's tcp_keepalive settings; 2 h by the OS
	// default), which this library cannot set: Margin no longer holds. HolderTold does.
	// See docs/guarantees.md.
	Proxied bool
	// TransactionPooler is true when that proxy is a transaction pooler (PgBouncer
	// pool_mode=transaction, Supabase's port 6543, Neon's -pooler endpoints, RDS Proxy):
	// it hands its server sessions from client to client between transactions, so the
	// Manager holds its locks as transactions there (see [WithHolding]), and a session
	// setting made on one of its connections would reach other clients.
	TransactionPooler bool
	// HeartbeatTold is the latest a holder is told that the server stopped answering
	// while its connection stays open, which no keepalive sees where a proxy answers them
	// (a frozen primary behind HAProxy, a server cut off from the proxy): the heartbeat
	// period plus the beat's 5 s timeout. 0 without a heartbeat (see [WithHeartbeat]: on
	// by default behind a proxy). New refuses a heartbeat behind a proxy unless
	// HeartbeatTold + the minimum margin is at most ServerFreesAfter.
	HeartbeatTold time.Duration
}

func computeBounds(client, server TCPKeepalive) Bounds {
	b := Bounds{HolderTold: max(client.abortAfter(), client.userTimeout())}
	b.ServerFreesAfter = min(server.abortAfter()-server.Idle, server.userTimeout())
	b.ServerFreesBy = server.abortAfter()
	b.Margin = b.ServerFreesAfter - b.HolderTold
	return b
}

// validateTiming checks both ends and the ordering the library exists to guarantee.
func validateTiming(client, server TCPKeepalive, minMargin time.Duration) error {
	if err := client.validate("client"); err != nil {
		return err
	}
	if err := server.validate("server"); err != nil {
		return err
	}
	b := computeBounds(client, server)
	if b.Margin < minMargin {
		return fmt.Errorf("%w: keepalive settings would let the server free a lock %v after a partition, "+
			"but the holder may only be told after %v (margin %v, minimum %v); shorten the client's "+
			"keepalive or lengthen the server's (see docs/keepalive.md)",
			ErrInvalidOption, b.ServerFreesAfter, b.HolderTold, b.Margin, minMargin)
	}
	return nil
}

// keepaliveDialer wraps a dial function so every TCP connection it makes carries the
// client keepalive settings and TCP_USER_TIMEOUT. Unix-socket connections are returned as
// they are: a local socket cannot be partitioned. Any other connection type is refused,
// because the lease would then have no bounded loss detection.
func keepaliveDialer(base func(ctx context.Context, network, addr string) (net.Conn, error),
	k TCPKeepalive) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		conn, err := base(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		if err := applyClientKeepalive(conn, k); err != nil {
			conn.Close()
			return nil, err
		}
		return conn, nil
	}
}

// applyClientKeepalive sets keepalive and TCP_USER_TIMEOUT on a new lock connection's
// socket, as k says.
func applyClientKeepalive(conn net.Conn, k TCPKeepalive) error {
	if conn.LocalAddr().Network() == "unix" {
		return nil
	}
	tcp, ok := conn.(*net.TCPConn)
	if !ok {
		return fmt.Errorf("advisory: cannot set TCP keepalive on a %T from the dial function; "+
			"return a *net.TCPConn or a Unix socket", conn)
	}
	err := tcp.SetKeepAliveConfig(net.KeepAliveConfig{Enable: true, Idle: k.Idle, Interval: k.Interval, Count: k.Count})
	if err != nil {
		return fmt.Errorf("advisory: set TCP keepalive: %w", err)
	}
	if err := sockfd.SetUserTimeout(tcp, k.userTimeout()); err != nil {
		return fmt.Errorf("advisory: set TCP_USER_TIMEOUT: %w", err)
	}
	return nil
}

// serverSettings are the session settings of every new lock connection, as (name,
// value) pairs. They set the server end's keepalive and, on PostgreSQL 14+,
// client_connection_check_interval, so a backend waiting in pg_advisory_lock notices a
// vanished client. They also clear the timeouts that would end a wait or an idle
// lock-holding session behind the caller's back: ctx is the only timeout of a Lock call,
// and a held lock lives as long as its connection.
func serverSettings(s *settings, serverVersion int) [][2]string {
	out := append(keepaliveSettings(s), [][2]string{
		{"lock_timeout", "0"},
		{"statement_timeout", "0"},
		{"idle_in_transaction_session_timeout", "0"},
	}...)
	if serverVersion >= 140000 {
		out = append(out, [2]string{"idle_session_timeout", "0"}, checkIntervalSetting(s))
	}
	return out
}

// workSettings are the settings of a connection that does a holding's work (see
// Lock.WorkOptions): those that make its backend notice a dead or cut-off client, and
// none of the lock connection's timeouts, which are the work's own business.
func workSettings(s *settings, serverVersion int) [][2]string {
	out := keepaliveSettings(s)
	if serverVersion >= 140000 {
		out = append(out, checkIntervalSetting(s))
	}
	return out
}

func keepaliveSettings(s *settings) [][2]string {
	k := s.serverKeepalive
	return [][2]string{
		{"tcp_keepalives_idle", strconv.Itoa(int(k.Idle / time.Second))},
		{"tcp_keepalives_interval", strconv.Itoa(int(k.Interval / time.Second))},
		{"tcp_keepalives_count", strconv.Itoa(k.Count)},
		{"tcp_user_timeout", strconv.Itoa(int(k.userTimeout() / time.Millisecond))},
	}
}

func checkIntervalSetting(s *settings) [2]string {
	return [2]string{"client_connection_check_interval", strconv.Itoa(int(s.connCheckInterval / time.Millisecond))}
}
