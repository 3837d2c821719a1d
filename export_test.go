package advisory

import "sync/atomic"

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
// on that connection instead of its prepareNamedAt-th (see statements_firstuse.go).
func WithPrepareNamedAtForTest(n int) Option {
	return Option{apply: func(s *settings) error { s.prepareNamedAt = n; return nil }}
}

// PrepareNamedAt is the use of a named statement on one connection at which it is prepared.
const PrepareNamedAt = prepareNamedAt

// PooledWorkAppNameForTest is the application_name that WorkConnString, WorkEnv and
// WorkConfig give work that may reach its server through a transaction pooler: the
// holding's tag with the pooled mark, then base.
func PooledWorkAppNameForTest(l *Lock, base string) string { return l.workName(base, true) }
