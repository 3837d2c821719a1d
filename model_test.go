package advisory_test

import (
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/modelcheck"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestModel is the model-based randomized test of the whole public API: see package
// internal/modelcheck for what it checks. ADVISORY_MODEL_SEED replays a seed,
// ADVISORY_MODEL_DURATION sets the run time, ADVISORY_MODEL_VERBOSE=1 logs every step.
// Skipped with -short. One of its Managers is made WithoutNamesInActivity: its named
// locks go by key, on the names the others lock with named statements.
func TestModel(t *testing.T) {
	if testing.Short() {
		t.Skip("model-based randomized test: skipped with -short")
	}
	cfg := modelConfig(t)
	cfg.Extra = map[int][]advisory.Option{2: {advisory.WithoutNamesInActivity()}}
	modelcheck.Run(t, cfg)
}

// TestModelChecked is TestModel, for a third of its time, with every connection keeping
// the per-statement ownership check (the statements a connection through a proxy or NAT
// runs), so that the model also drives those statements and their clean-ups. Its
// connections cache 4 statements and prepare a name at its second use, so a connection's
// budget of prepared names is 2 and the model's names run prepared, unprepared on first
// use and unprepared past the budget.
func TestModelChecked(t *testing.T) {
	if testing.Short() {
		t.Skip("model-based randomized test: skipped with -short")
	}
	cfg := namesPreparedSoon(modelConfig(t, advisory.WithCheckedStatementsForTest()))
	requireCheckedStatements(t, cfg)
	cfg.Duration /= 3
	modelcheck.Run(t, cfg)
}

// TestModelHandoff is TestModel, for a third of its time, with in-process handoff on in
// every Manager (a short bound, so that runs end often), so that the model's calls of one
// Manager on one name pass the lock between them: the judge's checks (one live handle
// per backend, every live Lock granted in pg_locks, a terminated holder told, nothing
// left held or pinned) then hold across handoffs. It fails if the run made none. Like
// TestModelChecked's, its connections cache 4 statements (the direct statements' paths).
func TestModelHandoff(t *testing.T) {
	if testing.Short() {
		t.Skip("model-based randomized test: skipped with -short")
	}
	runModelHandoff(t, 2)
}

// TestModelTransactionHandoff is TestModelHandoff, for a third of TestModel's time, with
// every Manager holding by transaction: a Lock whose BeginFunc left writes pending must
// not pass on (its Unlock commits them, which the judge checks), one without may, to a
// successor on the same backend.
func TestModelTransactionHandoff(t *testing.T) {
	if testing.Short() {
		t.Skip("model-based randomized test: skipped with -short")
	}
	runModelHandoff(t, 3, advisory.WithHolding(advisory.HoldingTransaction))
}

// runModelHandoff runs the model for 1/part of its time with in-process handoff on in
// every Manager, and opts, and fails if no lock passed in process.
func runModelHandoff(t *testing.T, part time.Duration, opts ...advisory.Option) {
	var handoffs atomic.Int64
	count := advisory.WithHooks(advisory.Hooks{Acquired: func(e advisory.LockEvent) {
		if e.Handoff {
			handoffs.Add(1)
		}
	}})
	cfg := namesPreparedSoon(modelConfig(t, append(opts, advisory.WithLocalHandoff(3, time.Minute), count)...))
	cfg.Duration /= part
	cfg.Handoffs = true
	modelcheck.Run(t, cfg)
	t.Logf("%d handoffs", handoffs.Load())
	require.Positive(t, handoffs.Load(), "the run passed no lock in process")
}

// modelConfig returns the model's view of the test harness, with the seed and duration
// from the environment and opts added to every Manager's options.
func modelConfig(t *testing.T, opts ...advisory.Option) modelcheck.Config {
	seed, duration := modelcheck.Settings(t)
	return modelcheck.Config{DSN: dsn, Admin: admin, Options: opts, Seed: seed, Duration: duration,
		Resting: advisory.RestingForTest}
}

// requireCheckedStatements checks that a Manager with the model's options runs the
// checked lock statement: else TestModelChecked would test the bare ones twice.
func requireCheckedStatements(t *testing.T, cfg modelcheck.Config) {
	ctx := ctxT(t)
	m, err := advisory.New(ctx, dsn(t), cfg.ManagerOptions()...)
	require.NoError(t, err)
	defer m.Close()
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	defer l.Unlock(ctx)
	var q string
	require.NoError(t, admin.QueryRow(ctx, "SELECT query FROM pg_stat_activity WHERE pid = $1", int32(l.PID())).Scan(&q))
	require.Contains(t, q, "pg_catalog.current_setting('advisory.owner', true) OPERATOR(pg_catalog.=) $2")
}

// namesPreparedSoon returns cfg with every connection's statement cache at 4 and names
// prepared at their second use (see pin_prepared.go: half the cache is the budget
// of prepared named statements), so that the model's few names reach every path: prepared,
// unprepared before their second use, and unprepared past the budget.
func namesPreparedSoon(cfg modelcheck.Config) modelcheck.Config {
	dsn := cfg.DSN
	cfg.DSN = func(t testing.TB, extra ...string) string {
		return dsn(t, append(extra, "statement_cache_capacity=4")...)
	}
	cfg.Options = append(cfg.Options, advisory.WithPrepareNamedAtForTest(2))
	return cfg
}

// TestModelTransaction is TestModel, for a third of its time, with every Manager holding
// its locks as transactions (WithHolding(HoldingTransaction)) on direct connections: the
// judge then also holds BeginFunc's writes pending until the holding's Unlock or Close,
// a Session's Unlock of a lock held once to ErrTransactionHolding, BeginTxFunc with
// options to a refusal, and each holding's backend to idle in transaction (see package
// internal/modelcheck).
func TestModelTransaction(t *testing.T) {
	if testing.Short() {
		t.Skip("model-based randomized test: skipped with -short")
	}
	cfg := modelConfig(t, advisory.WithHolding(advisory.HoldingTransaction))
	cfg.Duration /= 3
	modelcheck.Run(t, cfg)
}

// TestModelTransactionMixed is TestModel, for a third of its time, with one Manager of
// three holding by transaction and the others by session, so that both kinds of holding
// contend on the same keys (and the same Do, DoTx and Session calls).
func TestModelTransactionMixed(t *testing.T) {
	if testing.Short() {
		t.Skip("model-based randomized test: skipped with -short")
	}
	cfg := modelConfig(t)
	cfg.Extra = map[int][]advisory.Option{1: {advisory.WithHolding(advisory.HoldingTransaction)}}
	cfg.Duration /= 3
	modelcheck.Run(t, cfg)
}

// modelPooledServers is the PgBouncer pool of TestModelTransactionPooled: more server
// connections than the model's three Managers ever hold transactions open on at once
// (their live Locks and Sessions, a batch's calls, a Token's statement beside its lock),
// so that no call of the model waits in PgBouncer's queue for one.
const modelPooledServers = 40

// TestModelTransactionPooled is TestModelTransaction, for a third of TestModel's time,
// with the three Managers (HoldingAuto) behind a real PgBouncer in transaction mode: each
// finds the pooler and holds by transaction, every statement of theirs goes through it,
// and the model's terminations, reads of pg_locks and fencing checks go straight to the
// server, whose backends PgBouncer hands from client to client between transactions.
func TestModelTransactionPooled(t *testing.T) {
	if testing.Short() {
		t.Skip("model-based randomized test: skipped with -short")
	}
	dsn(t) // skips without a server
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(modelPooledServers))
	cfg := modelConfig(t)
	cfg.DSN = func(_ testing.TB, extra ...string) string { return pgtest.WithPairs(b.DSN(), extra...) }
	cfg.Duration /= 3
	requireHolding(t, cfg, advisory.HoldingTransaction)
	modelcheck.Run(t, cfg)
}

// requireHolding checks that a Manager with the model's options holds as want.
func requireHolding(t *testing.T, cfg modelcheck.Config, want advisory.Holding) {
	m, err := advisory.New(ctxT(t), cfg.DSN(t), cfg.ManagerOptions()...)
	require.NoError(t, err)
	defer m.Close()
	require.Equal(t, want, m.Holding())
}

// TestModelShared is TestModel, for a third of its time, with two Managers of three
// sharing sessions between their holdings (WithSharedSessions: at most 3 on a session,
// and 100), beside one that does not: the judge then allows several live Locks of one
// Manager on one backend, never two that claim one lock there, counts a shared
// session's connection once, and wants BeginFunc and Token on such a Lock refused with
// ErrSharedSession. It fails if no check saw a shared session.
func TestModelShared(t *testing.T) {
	if testing.Short() {
		t.Skip("model-based randomized test: skipped with -short")
	}
	cfg := modelConfig(t)
	var parked atomic.Int64
	cfg.Extra = map[int][]advisory.Option{
		1: {advisory.WithSharedSessions(3), advisory.WithWaitSessions(1), advisory.WithParkCounterForTest(&parked)},
		2: {advisory.WithSharedSessions(100)},
	}
	cfg.Shared = map[int]bool{1: true, 2: true}
	cfg.Parked = map[int]bool{1: true}
	cfg.Duration /= 3
	modelcheck.Run(t, cfg)
	t.Logf("%d Locks waited without a session", parked.Load())
	require.Positive(t, parked.Load(), "no Lock waited without a session (WithWaitSessions)")
}
