package advisory

import (
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
)

// WithCheckedStatementsForTest makes every connection of the Manager keep the
// per-statement ownership check, as a connection through a proxy does, so that tests
// can run the checked statements against the test server's direct connections.
func WithCheckedStatementsForTest() Option {
	return Option{apply: func(s *settings) error { s.checkedOnly = true; return nil }}
}

// WithBlindProbeForTest makes the proxy probe of the Manager's connections find nothing,
// as busy clients of a transaction pooler could make it, so that tests can meet the
// checks that follow it through a real pooler.
func WithBlindProbeForTest() Option {
	return Option{apply: func(s *settings) error { s.blindProbe = true; return nil }}
}

// WithParkCounterForTest counts in n the Manager's Locks that waited without a session
// (WithWaitSessions).
func WithParkCounterForTest(n *atomic.Int64) Option {
	return Option{apply: func(s *settings) error { s.parkedCount = n; return nil }}
}

// WithHostLingerForTest makes an idle shared session of the Manager rest d, not
// hostLinger, before it goes back to the pool.
func WithHostLingerForTest(d time.Duration) Option {
	return Option{apply: func(s *settings) error { s.hostLinger = d; return nil }}
}

// RestingForTest returns how many shared sessions of m rest, holding nothing, before they
// go back to the pool. One that has rested a second longer than its rest should have gone
// back, and is not counted: a session that never stops resting is a leak.
func RestingForTest(m *Manager) int {
	m.hosts.mu.Lock()
	defer m.hosts.mu.Unlock()
	n := 0
	for _, h := range m.hosts.hosts {
		if m.hosts.restsNow(h) && time.Since(h.idleAt) < m.hosts.linger+time.Second {
			n++
		}
	}
	return n
}

// HostLinger is how long an idle shared session rests before it goes back to the pool.
const HostLinger = hostLinger

// QueuedForTest returns how many Lock calls of the Manager wait in its in-process queue
// for key (the bigint form).
func QueuedForTest(m *Manager, key Key) int {
	m.gates.mu.Lock()
	defer m.gates.mu.Unlock()
	if g := m.gates.m[gateKey{key, false}]; g != nil {
		return len(g.queue)
	}
	return 0
}

// WithPrepareNamedAtForTest makes a connection prepare a named statement at its n-th use
// on that connection instead of its prepareNamedAt-th (see pin_prepared.go).
func WithPrepareNamedAtForTest(n int) Option {
	return Option{apply: func(s *settings) error { s.prepareNamedAt = n; return nil }}
}

// PrepareNamedAt is the use of a named statement on one connection at which it is prepared.
const PrepareNamedAt = prepareNamedAt

// LockTextForTest is one lock statement the library sends where a connection may reach
// another server than its set-up checked: its text and its arguments (none: a
// simple-protocol Query, its arguments written in). Its first column is the backend's
// pid: 0 where it ran on a standby.
type LockTextForTest struct {
	Name string
	SQL  string
	Args []any
}

// LockTextsForTest returns every such lock statement for key, on a connection whose
// ownership token is token (see ownedBy): the session holding's lock and try in each
// mode (and a slice of a wait), the bulk ones, a shared session's batch, a transaction
// holding's and a transaction Session's takes.
func LockTextsForTest(key Key, token string) []LockTextForTest {
	var out []LockTextForTest
	lit := keyLiteral(key)
	for _, shared := range []bool{false, true} {
		for _, pair := range []bool{false, true} {
			st := statementsFor("standby", shared, pair, false)
			tx := txStatements("BEGIN; ", "standby", key, shared, pair)
			out = append(out,
				LockTextForTest{"lock", st.lock, []any{int64(key), token}},
				LockTextForTest{"tryLock", st.tryLock, []any{int64(key), token}},
				LockTextForTest{"unlock", st.unlock, []any{int64(key), token}},
				LockTextForTest{"tx lock", tx.lock, nil},
				LockTextForTest{"tx tryLock", tx.tryLock, nil})
		}
	}
	keys := []int64{int64(key), int64(key) + 1}
	ts := []target{{key: key, name: "standby"}, {key: key + 1}}
	m := &Manager{}
	return append(out,
		LockTextForTest{"slice", sliceText(statementsFor("standby", false, false, false).lock, lit, token, time.Second), nil},
		LockTextForTest{"lockAll", lockAllSQL, []any{keys, token}},
		LockTextForTest{"tryLockAll", tryLockAllSQL, []any{keys, token}},
		LockTextForTest{"host batch", hostBatchSQL, []any{keys, token, []int32{1, 2}}},
		LockTextForTest{"tx Session lock", "BEGIN; " + txKeysSQL(m, ts[:1], false), nil},
		LockTextForTest{"tx Session tryLock", "BEGIN; " + txKeysSQL(m, ts[:1], true), nil},
		LockTextForTest{"tx Session lockAll", "BEGIN; " + txKeysSQL(m, ts, false), nil},
		LockTextForTest{"tx Session tryLockAll", "BEGIN; " + txKeysSQL(m, ts, true), nil})
}

// PooledWorkAppNameForTest is the application_name that WorkConnString, WorkEnv and
// WorkConfig give work that may reach its server through a transaction pooler: the
// holding's tag with the pooled mark, then base.
func PooledWorkAppNameForTest(l *Lock, base string) string { return l.workName(base, true) }

// PoolForTest returns the Manager's pool, so that a benchmark can send raw statements on
// a connection made with the library's own pgx configuration (its dialer, cancel handler
// and health check).
func PoolForTest(m *Manager) *pgxpool.Pool { return m.pool }

// TxLockTextForTest returns the text a transaction holding's Lock (or TryLock) of name
// sends: BEGIN, the holding's settings and the lock statement, in one message.
func TxLockTextForTest(m *Manager, name string, try bool) string {
	t := target{key: KeyOf(name), name: name}
	st := txStatements(m.txBegin, m.activityName(t.name), t.key, false, false)
	if try {
		return st.tryLock
	}
	return st.lock
}

// ConnWaitsForTest returns how many calls of the Manager wait for a connection its
// sessions pin (see reserve).
func ConnWaitsForTest(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return len(m.connWaits)
}

// PinnedForTest returns how many pool connections the Manager counts as pinned.
func PinnedForTest(m *Manager) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pinned
}
