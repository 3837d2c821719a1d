package advisory_test

// Issue 9 against the real thing: Debian's PgBouncer (internal/pgtest.StartPgBouncer) in
// front of the test server. In transaction and statement mode every call must fail with
// ErrPooler and nothing may go wrong on the server; in session mode locks must work.
// These tests reproduced the defects of issue 9 (two holders, stranded locks, leaked
// settings, bare SQLSTATEs) on the code before the fix.

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// poolerLoads are the two conditions every pooler test runs in: the library's clients
// alone, and with a few other clients keeping PgBouncer's server connections busy.
var poolerLoads = []struct {
	name string
	busy int // background clients
}{{"quiet", 0}, {"busy", 3}}

// TestPgBouncerTransactionPooling runs the issue-9 checks where no lock can be held:
// through PgBouncer in transaction mode by a Manager asked for session holdings
// (WithHolding(HoldingSession)), and in statement mode whatever the Manager asks; quiet
// and busy. Each step is a subtest so the report says which guarantee broke. The four
// scenarios run in parallel with each other, not with the package's other tests (their
// background load would stretch those tests' timings on two cores). Transaction
// holdings through the same pooler are pooler_real_tx_test.go's.
func TestPgBouncerTransactionPooling(t *testing.T) {
	for _, mode := range []pgtest.PoolMode{pgtest.PoolTransaction, pgtest.PoolStatement} {
		for _, load := range poolerLoads {
			t.Run(string(mode)+"/"+load.name, func(t *testing.T) {
				t.Parallel()
				pgtest.Need(t, srv, startErr)
				b := pgtest.PgBouncerForTest(t, srv, mode, pgtest.WithConnectQuery(connectQuery(serverConnDefaults)))
				busyClients(t, b.DSN(), load.busy)
				opts := []advisory.Option{advisory.WithHolding(advisory.HoldingSession)}
				if mode == pgtest.PoolStatement {
					opts = nil // the default, HoldingAuto: refused all the same
					t.Run("New says statement pooling", func(t *testing.T) { statementPoolingRefused(t, b) })
				}
				for _, c := range clientModes(b) {
					t.Run("every call fails with ErrPooler/"+c.name, func(t *testing.T) { poolerCallsFail(t, c.dsn, opts...) })
					t.Run("never two holders/"+c.name, func(t *testing.T) { poolerNeverTwoHolders(t, c.dsn, opts...) })
				}
				t.Run("a direct holder keeps its lock", func(t *testing.T) { poolerKeepsForeignLock(t, b, opts...) })
				t.Run("no lock left on a server connection", func(t *testing.T) { requireNoLockLeft(t, b) })
				t.Run("no session setting leaks", func(t *testing.T) { requireNoSettingLeaked(t, b, serverConnDefaults) })
			})
		}
	}
}

// statementPoolingRefused: New, asked for any kind of holding, refuses a statement
// pooler with ErrPooler, in words that say statement pooling (not "cannot connect").
func statementPoolingRefused(t *testing.T, b *pgtest.PgBouncer) {
	for _, h := range []advisory.Holding{advisory.HoldingAuto, advisory.HoldingSession, advisory.HoldingTransaction} {
		m, err := advisory.New(ctxT(t), b.DSN(), advisory.WithHolding(h))
		if m != nil {
			m.Close()
		}
		require.ErrorIs(t, err, advisory.ErrPooler, "holding %v", h)
		assert.Contains(t, err.Error(), "statement pooling", "holding %v", h)
		assert.NotContains(t, err.Error(), "connect:", "holding %v", h)
	}
}

// serverConnDefaults are settings PgBouncer's connect_query gives each of its server
// connections in transaction and statement mode. The server's own defaults of these are
// 0, the very values the library sets, so without them a leak of the library's
// lock_timeout = 0 or statement_timeout = 0 to other clients could not be seen.
var serverConnDefaults = map[string]string{"lock_timeout": "17s", "statement_timeout": "19s"}

// connectQuery is the SQL that SETs settings.
func connectQuery(settings map[string]string) string {
	var sets []string
	for name, value := range settings {
		sets = append(sets, "SET "+name+" = '"+value+"'")
	}
	sort.Strings(sets)
	return strings.Join(sets, "; ")
}

// clientModes are the DSNs the library's clients use through PgBouncer: pgx's default
// (statements prepared and cached per connection), and the simple protocol that PgBouncer
// users are told to configure, with which no prepared statement can go missing.
func clientModes(b *pgtest.PgBouncer) []struct{ name, dsn string } {
	return []struct{ name, dsn string }{
		{"pgx default", b.DSN()},
		{"simple protocol", pgtest.WithPairs(b.DSN(), "default_query_exec_mode=simple_protocol")},
	}
}

// poolerCallsFail: New may fail with ErrPooler; if it does not, Lock, TryLock, Session
// (and the Session's own Lock) must each fail with an error wrapping ErrPooler, never a
// bare SQLSTATE and never a "held" lock. Three rounds each, so that a call that fails only
// sometimes is caught.
func poolerCallsFail(t *testing.T, dsn string, opts ...advisory.Option) {
	ctx := ctxT(t)
	m, err := advisory.New(ctx, dsn, opts...)
	report(t, "New", err, nil)
	if err != nil {
		assert.ErrorIs(t, err, advisory.ErrPooler)
		return
	}
	defer m.Close()
	for round := 0; round < 3; round++ {
		name := fmt.Sprintf("%s/%d", t.Name(), round)
		for _, call := range []struct {
			name string
			lock func(context.Context, string) (*advisory.Lock, error)
		}{{"Lock", m.Lock}, {"TryLock", m.TryLock}} {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			l, err := call.lock(cctx, name)
			cancel()
			report(t, call.name, err, l)
			assert.ErrorIs(t, err, advisory.ErrPooler, "%s", call.name)
			if l != nil {
				uerr := l.Unlock(ctx)
				report(t, "Unlock", uerr, nil)
				assert.ErrorIs(t, uerr, advisory.ErrPooler, "Unlock of a lock taken through a pooler")
			}
		}
		poolerSessionFails(t, m, name+"/session")
	}
}

func poolerSessionFails(t *testing.T, m *advisory.Manager, name string) {
	ctx, cancel := context.WithTimeout(ctxT(t), 5*time.Second)
	defer cancel()
	S, err := m.Session(ctx)
	report(t, "Session", err, nil)
	assert.ErrorIs(t, err, advisory.ErrPooler, "Session")
	if err != nil {
		return
	}
	defer S.Close(ctx)
	err = S.Lock(ctx, name)
	report(t, "Session.Lock", err, nil)
	assert.ErrorIs(t, err, advisory.ErrPooler, "Session.Lock")
	if err == nil {
		err = S.Unlock(ctx, name)
		report(t, "Session.Unlock", err, nil)
		assert.ErrorIs(t, err, advisory.ErrPooler, "Session.Unlock")
	}
}

// poolerNeverTwoHolders: two Managers through PgBouncer TryLock the same key, the second
// by name in some rounds and by raw key in others (another statement text: no prepared
// statement to collide with): at most one may succeed, and a success must be a lock its
// own backend truly holds (pg_locks, seen directly).
func poolerNeverTwoHolders(t *testing.T, dsn string, opts ...advisory.Option) {
	ctx := ctxT(t)
	var ms [2]*advisory.Manager
	for i := range ms {
		m, err := advisory.New(ctx, dsn, opts...)
		if err != nil {
			assert.ErrorIs(t, err, advisory.ErrPooler)
			return
		}
		t.Cleanup(m.Close)
		ms[i] = m
	}
	for round := 0; round < 6; round++ {
		name := fmt.Sprintf("%s/%d", t.Name(), round)
		key := advisory.KeyOf(name)
		tries := []func() (*advisory.Lock, error){
			func() (*advisory.Lock, error) { return ms[0].TryLock(ctx, name) },
			func() (*advisory.Lock, error) { return ms[1].TryLock(ctx, name) },
		}
		calls := []string{"TryLock#1", "TryLock#2"}
		if round%2 == 1 {
			tries[1] = func() (*advisory.Lock, error) { return ms[1].TryLockKey(ctx, key) }
			calls[1] = "TryLockKey#2"
		}
		var held []*advisory.Lock
		for i, try := range tries {
			l, err := try()
			report(t, calls[i], err, l)
			if err == nil {
				held = append(held, l)
				assert.Contains(t, grantedPIDs(t, key), l.PID(), "%s: the lock is not held by its backend %d", calls[i], l.PID())
			}
		}
		assert.LessOrEqual(t, len(held), 1, "two holders of %q at once", name)
		for _, l := range held {
			l.Unlock(ctx)
		}
	}
}

// poolerKeepsForeignLock: Manager A holds the key on a direct connection; Manager B,
// through PgBouncer, tries everything on it. Whatever B's error paths do (unlock,
// reconcile, terminate), A's lock must stay held by A's backend throughout.
func poolerKeepsForeignLock(t *testing.T, b *pgtest.PgBouncer, opts ...advisory.Option) {
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	a := newManager(t, nil)
	la, err := a.Lock(ctx, name)
	require.NoError(t, err)
	defer la.Unlock(ctx)
	mb, err := advisory.New(ctx, b.DSN(), opts...)
	if err == nil {
		defer mb.Close()
		for round := 0; round < 3; round++ {
			tries := []func(context.Context, string) (*advisory.Lock, error){mb.TryLock, mb.Lock}
			for i, try := range tries {
				cctx, cancel := context.WithTimeout(ctx, time.Second)
				l, err := try(cctx, name)
				cancel()
				report(t, []string{"TryLock held elsewhere", "Lock held elsewhere (1s)"}[i], err, l)
				assert.ErrorIs(t, err, advisory.ErrPooler)
				if l != nil {
					l.Unlock(ctx)
				}
				requireHeldBy(t, key, la.PID())
			}
		}
		mb.Close()
	} else {
		report(t, "New", err, nil)
		assert.ErrorIs(t, err, advisory.ErrPooler)
	}
	requireHeldBy(t, key, la.PID())
	assert.NoError(t, la.Err(), "A's lock ended")
}

// report logs one call's outcome in a form the table is built from:
// "RESULT <test> | <call> | <outcome>".
func report(t *testing.T, call string, err error, l *advisory.Lock) {
	t.Helper()
	t.Logf("RESULT %s | %s | %s", t.Name(), call, outcome(t, err, l))
}

func outcome(t *testing.T, err error, l *advisory.Lock) string {
	var pgErr *pgconn.PgError
	switch {
	case err == nil && l != nil:
		return fmt.Sprintf("ok: held, l.PID()=%d, pg_locks holders %v", l.PID(), grantedPIDs(t, l.Key()))
	case err == nil:
		return "ok"
	case errors.Is(err, advisory.ErrPooler):
		return "ErrPooler"
	case errors.Is(err, advisory.ErrLocked):
		return "ErrLocked"
	case errors.Is(err, context.DeadlineExceeded):
		return "ctx deadline exceeded"
	case errors.As(err, &pgErr):
		return "SQLSTATE " + pgErr.Code + " (" + pgErr.Message + ")"
	}
	return "other: " + err.Error()
}

// grantedPIDs returns the backends holding key (seen on a direct connection).
func grantedPIDs(t testing.TB, key advisory.Key) []uint32 {
	var pids []uint32
	for _, r := range lockRows(t, key) {
		if r.Granted {
			pids = append(pids, r.PID)
		}
	}
	return pids
}
