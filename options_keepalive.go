package advisory

import (
	"fmt"
	"time"
)

// The options of loss detection: keepalive on both ends and the margin between them,
// client_connection_check_interval, the heartbeat, and the grace of a cancelled wait.
// docs/keepalive.md has the formula and the table of defaults.

// WithClientKeepalive sets TCP keepalive on the client end of every lock connection: it
// bounds how long a holder takes to learn that a silent network cut its lock away. The
// default is Idle 4s, Interval 2s, Count 3, UserTimeout 10s: told within 10 s. libpq's
// keepalives_idle, keepalives_interval, keepalives_count and tcp_user_timeout in the
// connection string set the same thing; New refuses both at once with [ErrInvalidOption].
// New also refuses, before connecting, with ErrInvalidOption, a client keepalive that
// would tell the holder later than the minimum margin ([WithMinMargin]) before the
// server's keepalive ([WithServerKeepalive]) can free the lock.
func WithClientKeepalive(k TCPKeepalive) Option {
	return option(func(s *settings) error { s.clientKeepalive, s.clientKeepaliveSet = k, true; return nil })
}

// WithServerKeepalive sets tcp_keepalives_idle, tcp_keepalives_interval,
// tcp_keepalives_count and tcp_user_timeout on the server end of every lock connection: it
// bounds how long a dead or cut-off holder keeps the lock. The default is Idle 10s,
// Interval 5s, Count 4, UserTimeout 30s: freed between 20 s and 30 s after a partition.
// Over a Unix socket these settings do nothing (a local socket cannot be partitioned).
// New refuses, before connecting, with [ErrInvalidOption], a server keepalive that could
// free the lock sooner than the minimum margin ([WithMinMargin]) after the client's
// keepalive ([WithClientKeepalive]) tells the holder. Behind a proxy, where the heartbeat
// tells the holder instead, New also refuses a server keepalive that could free the lock
// sooner than the minimum margin after the heartbeat ([WithHeartbeat]) tells.
func WithServerKeepalive(k TCPKeepalive) Option {
	return option(func(s *settings) error { s.serverKeepalive = k; return nil })
}

// WithMinMargin sets how much earlier, at worst, the holder must be told of a partition
// than the server can free its lock (see [Bounds]). New refuses, before connecting, with
// [ErrInvalidOption], keepalive settings ([WithClientKeepalive], [WithServerKeepalive])
// that give less; behind a proxy it also refuses a heartbeat ([WithHeartbeat]) that gives
// less. The default is 5s; it must be at least 1s.
func WithMinMargin(d time.Duration) Option {
	return option(func(s *settings) error {
		if d < time.Second {
			return fmt.Errorf("%w: minimum margin %v is below 1s", ErrInvalidOption, d)
		}
		s.minMargin = d
		return nil
	})
}

// WithConnectionCheckInterval sets client_connection_check_interval (PostgreSQL 14+) on
// lock connections: how often a backend waiting in pg_advisory_lock checks that its
// client is still there, so a waiter whose process died is not granted the lock. The
// default is 1s; it must be whole milliseconds from 100ms to 1h. Older servers ignore it.
func WithConnectionCheckInterval(d time.Duration) Option {
	return option(func(s *settings) error {
		if d < 100*time.Millisecond || d > time.Hour || d%time.Millisecond != 0 {
			return fmt.Errorf("%w: connection check interval %v; want whole milliseconds from 100ms to 1h",
				ErrInvalidOption, d)
		}
		s.connCheckInterval = d
		return nil
	})
}

// WithCancelGrace sets how long a cancelled Lock waits for the server to confirm that it
// stopped waiting (SQLSTATE 57014) before it gives up on the connection and closes it
// (a [Session]'s wait then ends the Session, and with it its locks: its Err wraps
// [ErrLockLost]). On a healthy server the confirmation takes about a millisecond; on a
// starved one the CancelRequest, a new connection the server forks a process for, can
// take longer. The default is 1s; it
// must be from 10ms to 1m. The grace bounds the caller's wait only: the CancelRequest's
// own connection stays open until the server (or a pooler) closes it, never abandoned
// (PgBouncer 1.18 exits on an abandoned cancel), and [Manager.Close] waits for it. Under
// [WithHeartbeat] a wait the server does not end also fails within the heartbeat, 5 s and
// this grace.
func WithCancelGrace(d time.Duration) Option {
	return option(func(s *settings) error {
		if d < 10*time.Millisecond || d > time.Minute {
			return fmt.Errorf("%w: cancel grace %v; want 10ms to 1m", ErrInvalidOption, d)
		}
		s.cancelGrace = d
		return nil
	})
}

// WithHeartbeat makes every connection the Manager keeps open speak at least every d,
// for platforms that end connections or sessions that stay quiet: a pooler's or proxy's
// idle timeout (PgBouncer's client_idle_timeout and idle_transaction_timeout, RDS Proxy's
// IdleClientTimeout, HAProxy's timeout client) or a serverless compute that suspends
// after inactivity (Neon). Set d well below the shortest such limit. A held Lock or
// Session sends one cheap statement (SELECT pg_backend_pid()) every d; it never interrupts
// or waits for anything: it is skipped while the connection is busy (BeginFunc, Token, a
// drain, a Session's call, Unlock), and a beat that finds the session gone, or that gets
// no answer within 5 s, reports the loss as the watcher would (Done closes, Err wraps
// ErrLockLost). A Lock waiting on the server (and a Session's Lock) waits in slices of d:
// each slice is the lock statement under lock_timeout d, and one that ends without the
// grant is followed at once by the next; between two slices the wait leaves the server's
// queue and joins it again at its end. A wait is watched like a holding: a slice the
// server has not ended 5 s after its lock_timeout (a frozen server) fails the Lock, not
// with ctx's error, within d + 5 s + the cancel grace ([WithCancelGrace]), and closes its
// connection (a Session's wait ends the Session), so the server never grants it later.
// A TryLock (a Session's too) and a Lock's Unlock are watched the same way: a statement
// the server has not answered within d + 5 s fails the call, not with ctx's error, within
// that and the cancel grace, and closes its connection (an Unlock then reports the lock
// lost: its release was not confirmed).
// The Manager's LISTEN connections (observers, a semaphore's waiter) send SELECT 1 after
// d without a notification. A direct connection
// needs none of it: the library sets idle_session_timeout to 0 on it. The default is 0,
// off (no timer, nothing sent), on a direct connection. Behind a proxy ([Bounds].Proxied:
// a pooler, or a TCP proxy such as the HAProxy in front of a Patroni cluster, which
// answers the client's keepalives itself) it is 2s: only a round trip through PostgreSQL
// sees a frozen server there.
//
// Behind a proxy New refuses, with [ErrInvalidOption], two heartbeats that work on a
// direct connection: a d whose loss report (d + 5 s, Bounds.HeartbeatTold) would come
// later than the minimum margin ([WithMinMargin]) before the server's keepalive
// ([WithServerKeepalive]) can free the lock (Bounds.ServerFreesAfter: with the defaults,
// any d above 10s, WithHeartbeat(25s) say); and WithHeartbeat(0) with transaction
// holdings: behind a transaction pooler, or with [WithHolding](HoldingTransaction) behind
// any proxy. Behind another proxy it allows WithHeartbeat(0) with a Warn: a holder then
// hears of a frozen server only if the proxy closes its session (HAProxy's
// on-marked-down shutdown-sessions; see docs/keepalive.md). d must be 0 or from 100ms to
// 24h (a sliced wait runs under lock_timeout d, which PostgreSQL bounds at 24.8 days);
// New refuses others with ErrInvalidOption. See docs/guarantees.md.
func WithHeartbeat(d time.Duration) Option {
	return option(func(s *settings) error {
		if d != 0 && (d < minHeartbeat || d > maxHeartbeat) {
			return fmt.Errorf("%w: heartbeat %v; want 0 (off) or from %v to %v (a waiting Lock waits in slices "+
				"under lock_timeout = the heartbeat, which PostgreSQL bounds at 24.8 days)",
				ErrInvalidOption, d, minHeartbeat, maxHeartbeat)
		}
		s.heartbeat, s.heartbeatSet = d, true
		return nil
	})
}
