package advisory

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// An Option configures a Manager; the With functions make them. Options are applied in
// order by New and NewWithConfig; an invalid value makes them return an error wrapping
// [ErrInvalidOption]. The zero Option changes nothing.
type Option struct {
	apply func(*settings) error
}

func option(f func(*settings) error) Option { return Option{apply: f} }

type settings struct {
	checkedOnly        bool // tests only: no connection is taken as direct (see export_test.go)
	blindProbe         bool // tests only: the proxy probe finds nothing (see export_test.go)
	prepareNamedAt     int  // tests only when not 0: the use at which a named statement is prepared (see unprepared)
	clientKeepalive    TCPKeepalive
	clientKeepaliveSet bool // by WithClientKeepalive
	serverKeepalive    TCPKeepalive
	connCheckInterval  time.Duration
	minMargin          time.Duration
	cancelGrace        time.Duration
	logger             *slog.Logger // nil: no logging
	namespace          string
	sessionCap         int
	sessionRetire      int
	sharePer           int           // holdings per shared session (WithSharedSessions); 0: no sharing
	waitSessions       int           // WithWaitSessions: shared Locks waiting on sessions of their own at once; 0: no bound
	parkedCount        *atomic.Int64 // tests only: counts the Locks that waited without a session (see park)
	fenceTable         string        // sanitized, possibly schema-qualified
	leaderTable        string        // WithLeaderTable, sanitized; "": published values are off
	leaderRecheck      time.Duration
	drainWait          time.Duration
	noDrain            bool          // WithoutDrain: Do, DoTx, TryDo and Lead do not drain
	workRoles          []string      // WithWorkRoles: more roles whose tagged sessions a drain waits for
	noNames            bool          // WithoutNamesInActivity: named locks' statements carry no name
	heartbeat          time.Duration // WithHeartbeat; 0: off
	heartbeatSet       bool          // by WithHeartbeat (else a Manager behind a proxy beats by default)
	holding            Holding       // WithHolding
	hooks              Hooks
	handoffMax         int           // WithLocalHandoff: handoffs per run; 0: off
	handoffBudget      time.Duration // WithLocalHandoff: no handoff later than this into a run
}

func defaultSettings() settings {
	return settings{
		clientKeepalive:   defaultClientKeepalive,
		serverKeepalive:   defaultServerKeepalive,
		connCheckInterval: defaultConnCheckInterval,
		minMargin:         defaultMinMargin,
		cancelGrace:       time.Second,
		sessionCap:        defaultSessionCap,
		sessionRetire:     defaultSessionRetire,
		fenceTable:        pgx.Identifier{DefaultFenceTable}.Sanitize(),
		drainWait:         time.Second,
		leaderRecheck:     DefaultLeaderRecheck,
	}
}

func (st *settings) validate() error {
	if err := validateTiming(st.clientKeepalive, st.serverKeepalive, st.minMargin); err != nil {
		return err
	}
	return st.forWaits()
}

// WithClientKeepalive sets TCP keepalive on the client end of every lock connection: it
// bounds how long a holder takes to learn that a silent network cut its lock away. The
// default is Idle 4s, Interval 2s, Count 3, UserTimeout 10s: told within 10 s. libpq's
// keepalives_idle, keepalives_interval, keepalives_count and tcp_user_timeout in the
// connection string set the same thing (New refuses both at once).
func WithClientKeepalive(k TCPKeepalive) Option {
	return option(func(s *settings) error { s.clientKeepalive, s.clientKeepaliveSet = k, true; return nil })
}

// WithServerKeepalive sets tcp_keepalives_idle, tcp_keepalives_interval,
// tcp_keepalives_count and tcp_user_timeout on the server end of every lock connection: it
// bounds how long a dead or cut-off holder keeps the lock. The default is Idle 10s,
// Interval 5s, Count 4, UserTimeout 30s: freed between 20 s and 30 s after a partition.
// Over a Unix socket these settings do nothing (a local socket cannot be partitioned).
func WithServerKeepalive(k TCPKeepalive) Option {
	return option(func(s *settings) error { s.serverKeepalive = k; return nil })
}

// WithMinMargin sets how much earlier, at worst, the holder must be told of a partition
// than the server can free its lock (see [Bounds]). New refuses keepalive settings that
// give less. The default is 5s; it must be at least 1s.
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
// (PgBouncer 1.18 exits on an abandoned cancel), and [Manager.Close] waits for it.
func WithCancelGrace(d time.Duration) Option {
	return option(func(s *settings) error {
		if d < 10*time.Millisecond || d > time.Minute {
			return fmt.Errorf("%w: cancel grace %v; want 10ms to 1m", ErrInvalidOption, d)
		}
		s.cancelGrace = d
		return nil
	})
}

// WithNamespace puts every lock name the Manager is given into a namespace, so that two
// applications sharing a database cannot take each other's locks by accident: the lock
// "migrations" becomes "billing:migrations" (psql: hashtextextended('billing:migrations', 0)),
// and that is the name its Lock reports. The namespace must be non-empty valid UTF-8
// without ':' or NUL, so that distinct namespaces never produce the same text. The
// default is none. Raw keys (LockKey) and transaction locks (XactLock) are not affected.
func WithNamespace(ns string) Option {
	return option(func(s *settings) error {
		if ns == "" || strings.ContainsAny(ns, ":\x00") || !utf8.ValidString(ns) || len(ns) > MaxNameLen/2 {
			return fmt.Errorf("%w: namespace %q: want non-empty valid UTF-8 of at most %d bytes without ':' or NUL",
				ErrInvalidOption, ns, MaxNameLen/2)
		}
		s.namespace = ns
		return nil
	})
}

// WithLeaderRecheck sets how often an observer ([Manager.Observe]) reads the leader again
// when no notification has come: the bound on how late it sees a leader that ended
// without a word (killed, cut off) and had no successor, or a holder that never announced
// itself. The default is [DefaultLeaderRecheck]; each re-check is one query.
func WithLeaderRecheck(d time.Duration) Option {
	return option(func(s *settings) error {
		if d <= 0 {
			return fmt.Errorf("%w: leader re-check interval %v: want a positive duration", ErrInvalidOption, d)
		}
		s.leaderRecheck = d
		return nil
	})
}

// WithDrainWait sets how long [Lock.Drain] (and Do, DoTx, TryDo and Lead before fn) waits
// for an earlier holder's work sessions to end on their own before it terminates them. A
// session whose client died ends on its own within client_connection_check_interval (1 s
// by default; PostgreSQL 14+) when it was tagged with [Lock.WorkOptions]. The default is
// 1s; 0 terminates at once; it must be at most 1h.
func WithDrainWait(d time.Duration) Option {
	return option(func(s *settings) error {
		if d < 0 || d > time.Hour {
			return fmt.Errorf("%w: drain wait %v; want 0 to 1h", ErrInvalidOption, d)
		}
		s.drainWait = d
		return nil
	})
}

// WithWorkRoles names roles whose sessions [Lock.Drain] waits for and terminates when
// they carry the tag of an earlier holding of the lock, besides the roles it covers
// anyway: its own and those whose privileges it has (the sessions it may terminate
// without pg_signal_backend, where a holder's own work runs). Name the roles that
// holders' work runs as when it is not the lock's role. A session of any other role that
// carries the tag is ignored, reported in [DrainReport.Ignored] and logged at Warn: a
// holder cannot have started it, and anyone who can log in can set an
// application_name. Terminating a named role's session takes pg_signal_backend (or its
// privileges); without it the drain fails with [ErrWorkNotDrained]. Names are compared
// with pg_stat_activity.usename exactly, as PostgreSQL spells them (case included). The
// default is none; a later WithWorkRoles replaces an earlier one; an empty name, one
// with NUL or longer than 63 bytes returns an error wrapping [ErrInvalidOption]. See
// docs/work.md, "Whose sessions the drain waits for".
func WithWorkRoles(roles ...string) Option {
	return option(func(s *settings) error {
		for _, r := range roles {
			if r == "" || len(r) > maxRoleName || strings.ContainsRune(r, 0) {
				return fmt.Errorf("%w: work role %q; want 1 to 63 bytes without NUL", ErrInvalidOption, r)
			}
		}
		s.workRoles = slices.Clone(roles)
		return nil
	})
}

// maxRoleName is PostgreSQL's limit on a role's name (NAMEDATALEN - 1).
const maxRoleName = 63

// WithoutDrain makes Do, DoTx, TryDo and Lead call fn without draining earlier holders'
// work first (see [Lock.Drain]), for programs whose functions never tag connections of
// their own: a drain costs one statement on the lock's connection (a scan of
// pg_stat_activity: about 40 µs of server time here, plus a round trip), which doubles
// the cost of a Do of an empty function. Lock.Drain still works. The default is to drain.
func WithoutDrain() Option {
	return option(func(s *settings) error { s.noDrain = true; return nil })
}

// WithoutNamesInActivity makes the Manager send its named locks' statements without the
// name: by key alone, as [Manager.LockKey] sends them. By default a named lock's statements
// start with a comment that names it, which pg_stat_activity shows, so that Holders,
// AllHolders and pgadvisory status, in any process, can say which name a session holds or
// waits for (see docs/keys.md). That comment makes each name's statement a text of its
// own, which the server parses at each use on a connection that has not prepared it: a
// fleet that locks many names, each rarely on any one connection, pays that parse on
// nearly every lock (docs/benchmarks.md, the fleet). With this option the locks are the
// same (a name's key is still KeyOf of the name, with the namespace: processes with and
// without the option exclude each other), and the process still knows every name
// ([Lock.Name], hooks, logs and errors carry it); only sessions looking from outside
// cannot: they see this Manager's locks and waits by key, with Holder.Name "" unless
// another session of the same key shows the name. Transaction locks ([XactLock] and the
// others) are not a Manager's and keep their comment. The default is to name.
func WithoutNamesInActivity() Option {
	return option(func(s *settings) error { s.noNames = true; return nil })
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
// connection (a Session's wait ends the Session), so the server never grants it later. The Manager's LISTEN connections (observers, a
// semaphore's waiter) send SELECT 1 after d without a notification. A direct connection
// needs none of it: the library sets idle_session_timeout to 0 on it. The default is 0,
// off (no timer, nothing sent), on a direct connection. Behind a proxy ([Bounds].Proxied:
// a pooler, or a TCP proxy such as the HAProxy in front of a Patroni cluster, which
// answers the client's keepalives itself) it is 2s: only a round trip through PostgreSQL
// sees a frozen server there. There New refuses a d whose loss report (d + 5 s,
// Bounds.HeartbeatTold) would come later than the minimum margin before
// Bounds.ServerFreesAfter, and WithHeartbeat(0) behind a transaction pooler; behind
// another proxy it allows WithHeartbeat(0) with a Warn: a holder then hears of a frozen
// server only if the proxy closes its session (HAProxy's on-marked-down
// shutdown-sessions; see docs/keepalive.md). d must be 0 or from 100ms to 24h (a sliced wait runs under lock_timeout d,
// which PostgreSQL bounds at 24.8 days); New refuses others with ErrInvalidOption. See
// docs/guarantees.md.
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

// WithLocalHandoff lets a lock pass between goroutines of the Manager without leaving
// the server session, bounded so that other processes still get their turn. When a Lock
// is unlocked while another [Manager.Lock] of the same key and form (name or raw key, or
// pair) waits in this Manager's queue, the lock passes to that call: no statement runs,
// and the new holder gets its own Lock (its own Done, Err, Token and work tag) on the
// same connection. A run of handoffs ends, and Unlock releases the lock on the server,
// after max handoffs or once budget has passed since the session took the lock from the
// server, whichever comes first. Meanwhile the Manager's queued calls wait in the
// process, not on the server (pg_locks and [Manager.Holders] do not show them), so a
// waiter in another process that waits on the server gets the lock after at most max
// more holdings by this Manager, none beginning later than budget into the run.
// TryLock, shared locks, Sessions and Semaphores never take part, nor a Lock that
// published a value or announced itself ([Lock.Publish], Lead): the value must go with
// its holding, which its release withdraws on the server. The default is off;
// max must be from 1 to 1000 and budget from 1µs to 1m (16 and 2ms suit most
// programs). See docs/locking.md, "In-process handoff".
func WithLocalHandoff(max int, budget time.Duration) Option {
	return option(func(s *settings) error {
		if max < 1 || max > 1000 || budget < time.Microsecond || budget > time.Minute {
			return fmt.Errorf("%w: local handoff %d, %v; want 1 to 1000 handoffs and 1µs to 1m",
				ErrInvalidOption, max, budget)
		}
		s.handoffMax, s.handoffBudget = max, budget
		return nil
	})
}
