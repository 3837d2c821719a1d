package advisory

import (
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"time"
	"unicode/utf8"
)

// The options of names, work fencing, leaders, hooks and logging.

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
// others) are not a Manager's and keep their comment. Locks held on a shared session
// ([WithSharedSessions]) are sent without the name with or without this option: a shared
// session's statements are batches. The default is to name.
func WithoutNamesInActivity() Option {
	return option(func(s *settings) error { s.noNames = true; return nil })
}

// WithDrainWait sets how long [Lock.Drain] (and Do, DoTx, TryDo and Lead before fn) waits
// for an earlier holder's work sessions to end on their own before it terminates them. A
// session whose client died ends on its own within client_connection_check_interval (1 s
// by default; PostgreSQL 14+) when it was tagged with [Lock.WorkOptions]. The default is
// 1s; 0 terminates at once; it must be at most 1h. Under [WithoutDrain] it bounds only
// the drains Lock.Drain runs when called.
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
// the cost of a Do of an empty function. Lock.Drain still works, waiting as
// [WithDrainWait] says. Under [WithSharedSessions] Do's and TryDo's locks, which need no
// session of their own for a drain then, may be taken on a shared session: fn's Lock then
// refuses Token, BeginFunc and Drain with ErrSharedSession. The default is to drain.
func WithoutDrain() Option {
	return option(func(s *settings) error { s.noDrain = true; return nil })
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

// WithHooks makes the Manager call h's functions on lock events (see [Hooks]). Under
// [WithLocalHandoff] a lock passed between two Lock calls is an Ended event (Reason
// "released") and an Acquired one, each with LockEvent.Handoff set. The default is none.
func WithHooks(h Hooks) Option {
	return option(func(s *settings) error { s.hooks = h; return nil })
}

// WithLogger makes the Manager report lock events to logger: "lock acquired" and "lock
// released" (Debug); "waiting for lock" with the holders when a Lock has waited 1 s
// (Info, with held_by_this_manager when the holder is another Lock of this Manager:
// ordinary contention between its goroutines); "waiting for a lock this Manager holds"
// (Warn, with how to re-enter) when the holder is a holding given to the waiting
// goroutine itself, on the server or queued behind a holder that may hand off, a wait
// that never ends; "waiting for a server connection of the pooler" (Warn, with the
// sizing rule) when, behind a transaction pooler, the holders could not be read within
// 1 s for want of a server connection; "lock lost" with its cause (Warn); and a Lock or
// TryLock tried once more because its connection was found dead or its session ended
// before it returned (Warn, with the cause). No wait record is written once the Lock has
// returned. Every record carries the lock's key and, when it has one, its name and the
// backend pid. The default is no logging. It panics if logger is nil. A panic in the
// logger's handler is recovered and dropped: the library goes on as if the record had
// been written.
func WithLogger(logger *slog.Logger) Option {
	if logger == nil {
		panic("advisory: WithLogger(nil)")
	}
	return option(func(s *settings) error { s.logger = logger; return nil })
}
