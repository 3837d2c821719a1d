package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// Pgpool-II (Debian's pgpool2) in streaming-replication mode, load_balance_mode = on, in
// front of the test server and a streaming standby of it (pgtest.PgpoolForTest). Pgpool
// keeps a client on its backends for the session (one per server), so it is a session
// proxy, not a transaction pooler; but it may send a statement it takes for a read to the
// standby, where an advisory lock is local to the standby and excludes nobody on the
// primary. Like the other tests that make a standby of the shared server, these run in
// parallel with the package's other tests: each standby streams through a replication slot
// of its own (pglocal), so a base backup taken while parallel tests write WAL fast (CREATE
// DATABASE) no longer fails with "requested WAL segment has already been removed".

// pgpoolManagers is how many Managers (each its own Pgpool sessions, with their
// load-balance node drawn at random: the standby for about one in two) a test makes, and
// pgpoolRounds how many times each runs every form of lock. Under -short, 6 and 3 (12
// and 10 otherwise): still a dozen draws or more of the node per test, so that both
// servers are met but for a chance of about 2 in 4,096.
func pgpoolManagers() int { return inShort(12, 6) }

func pgpoolRounds() int { return inShort(10, 3) }

// TestPgpoolIsASessionProxy reproduces issue 44 item 6's misdetection: through Pgpool-II
// with its defaults, the library took Pgpool for a transaction pooler in 7 of 13
// Managers, and TryLock failed with ErrPooler. Every Manager must see a session proxy
// (HoldingSession), and lock and unlock with no ErrPooler, on the primary.
func TestPgpoolIsASessionProxy(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	pp, sb := pgtest.PgpoolForTest(t, srv, pgtest.PgpoolDefaults)
	ctx := ctxT(t)
	for i := range pgpoolManagers() {
		name := fmt.Sprintf("%s/%d", t.Name(), i)
		m, err := advisory.New(ctx, pp.DSN())
		require.NoError(t, err, "New through Pgpool-II (Manager %d)\n%s", i, pp.Log())
		assert.Equal(t, advisory.HoldingSession, m.Holding(), "Manager %d: Pgpool-II is no transaction pooler", i)
		l, err := m.TryLock(ctx, name)
		require.NoError(t, err, "TryLock through Pgpool-II (Manager %d)", i)
		requireHeldBy(t, l.Key(), l.PID())
		assert.Empty(t, holdersAt(t, sb.DSN(), l.Key()), "nothing held on the standby")
		require.NoError(t, l.Unlock(ctx))
		l, err = m.Lock(ctx, name)
		require.NoError(t, err, "Lock through Pgpool-II (Manager %d)", i)
		requireHeldBy(t, l.Key(), l.PID())
		require.NoError(t, l.Unlock(ctx))
		requireFree(t, l.Key())
		m.Close()
	}
}

// TestPgpoolNeverLocksOnTheStandby reproduces issue 44 item 6's standby holdings: through
// Pgpool-II configured as its docs show (write_function_list, allow_sql_comments = on),
// XactLock and TryXactLock in a caller's transaction were balanced to the standby and
// "held" the key there while it was held on the primary. Many critical sections through
// Pgpool, with every form, must never see the key granted on the standby (its own
// pg_locks, read directly); a lock statement that Pgpool sends to the standby fails with
// ErrStandby, and one that reaches the primary holds the key there. With
// statement_level_load_balance, Pgpool chooses the server of each statement anew: a
// Manager's lock statements then meet the standby after a set-up on the primary.
func TestPgpoolNeverLocksOnTheStandby(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	// The two run at once, each with its standby and Pgpool.
	t.Run("session-level", func(t *testing.T) { t.Parallel(); pgpoolNeverOnTheStandby(t) })
	t.Run("statement-level", func(t *testing.T) {
		t.Parallel()
		pgpoolNeverOnTheStandby(t, "statement_level_load_balance = on")
	})
}

func pgpoolNeverOnTheStandby(t *testing.T, extra ...string) {
	pp, sb := pgtest.PgpoolForTest(t, srv, pgtest.PgpoolFunctionList, extra...)
	ctx := ctxT(t)
	standby, err := pgx.Connect(ctx, sb.DSN())
	require.NoError(t, err)
	defer standby.Close(context.Background())
	c := &pgpoolCount{t: t, standby: standby, perStatement: len(extra) > 0}
	for i := range pgpoolManagers() {
		name := fmt.Sprintf("%s/%d", t.Name(), i)
		c.xact(ctx, pp.DSN(), name)
		c.managed(ctx, pp.DSN(), name)
	}
	t.Logf("critical sections on the primary: %d; lock statements refused with ErrStandby: %d; Managers refused "+
		"by New with ErrStandby: %d; unlocks refused with ErrStandby: %d", c.held, c.refused, c.newRefused, c.unlockRefused)

	assert.Positive(t, c.held, "some sessions' lock statements reach the primary")
	assert.Positive(t, c.refused+c.newRefused, "some sessions' lock statements are balanced to the standby")
}

// pgpoolCount runs critical sections through Pgpool-II and counts how they ended.
type pgpoolCount struct {
	t                         *testing.T
	standby                   *pgx.Conn // straight to the standby
	held, refused, newRefused int
	unlockRefused             int  // statement-level balancing: an unlock sent to the standby
	perStatement              bool // Pgpool balances each statement (statement_level_load_balance)
}

// unlocked checks how an Unlock ended: nil, or, where Pgpool balances each statement,
// ErrStandby or ErrPooler (an unlock or clean-up statement went to the standby and did
// nothing there: the connection is closed, which releases the lock on the primary). It
// reports whether the holder may go on; if not, it waits until the primary has freed key
// (the closed connection's backend exits), so that the next try does not find it held.
func (c *pgpoolCount) unlocked(err error, what string, key advisory.Key) bool {
	c.t.Helper()
	if c.perStatement && (errors.Is(err, advisory.ErrStandby) || errors.Is(err, advisory.ErrPooler)) {
		c.unlockRefused++
		eventually(c.t, 10*time.Second, func() bool { return len(lockRows(c.t, key)) == 0 }, "%s: key %d freed", what, key)
		return false
	}
	require.NoError(c.t, err, what)
	return true
}

// onStandby fails the test if the standby's pg_locks shows any advisory lock granted.
func (c *pgpoolCount) onStandby(ctx context.Context, what string) {
	c.t.Helper()
	var n int
	require.NoError(c.t, c.standby.QueryRow(ctx,
		"SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND granted").Scan(&n))
	require.Zero(c.t, n, "%s: an advisory lock granted on the standby", what)
}

// settle counts how one lock call ended: held (then the key must be held on the primary,
// and nothing on the standby), refused with ErrStandby, or it fails the test.
func (c *pgpoolCount) settle(ctx context.Context, what string, key advisory.Key, err error) bool {
	c.t.Helper()
	c.onStandby(ctx, what)
	if errors.Is(err, advisory.ErrStandby) {
		c.refused++
		return false
	}
	require.NoError(c.t, err, what)
	require.Len(c.t, lockRows(c.t, key), 1, "%s: the key held on the primary", what)
	c.held++
	return true
}

// xact runs XactLock, TryXactLock and their shared forms in transactions of a fresh
// Pgpool session (a load-balance node of its own).
func (c *pgpoolCount) xact(ctx context.Context, dsn, name string) {
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(c.t, err)
	defer conn.Close(context.Background())
	key := advisory.KeyOf(name)
	forms := map[string]func(context.Context, pgx.Tx, string) error{
		"XactLock": advisory.XactLock, "TryXactLock": advisory.TryXactLock,
		"XactLockShared": advisory.XactLockShared, "TryXactLockShared": advisory.TryXactLockShared,
	}
	for range pgpoolRounds() {
		for form, lock := range forms {
			tx, err := conn.Begin(ctx)
			require.NoError(c.t, err)
			c.settle(ctx, form, key, lock(ctx, tx, name))
			require.NoError(c.t, tx.Rollback(ctx))
		}
	}
}

// managed runs Lock, TryLock and a Session's Lock through a fresh Manager: New refuses a
// Pgpool session whose statements go to the standby (ErrStandby), or it holds by session
// (Pgpool is no transaction pooler) and every lock holds the key on the primary.
func (c *pgpoolCount) managed(ctx context.Context, dsn, name string) {
	m, err := advisory.New(ctx, dsn)
	c.onStandby(ctx, "New")
	if errors.Is(err, advisory.ErrStandby) {
		c.newRefused++
		return
	}
	require.NoError(c.t, err)
	defer m.Close()
	assert.Equal(c.t, advisory.HoldingSession, m.Holding(), "Pgpool-II is no transaction pooler")
	key := advisory.KeyOf(name)
	for range pgpoolRounds() {
		l, err := m.Lock(ctx, name)
		if c.settle(ctx, "Lock", key, err) {
			c.unlocked(l.Unlock(ctx), "Unlock", key)
		}
		l, err = m.TryLock(ctx, name)
		if c.settle(ctx, "TryLock", key, err) {
			c.unlocked(l.Unlock(ctx), "Unlock", key)
		}
	}
	s, err := m.Session(ctx)
	if errors.Is(err, advisory.ErrStandby) {
		c.refused++
		return
	}
	require.NoError(c.t, err)
	defer s.Close(ctx)
	for range pgpoolRounds() {
		if c.settle(ctx, "Session.Lock", key, s.Lock(ctx, name)) && !c.unlocked(s.Unlock(ctx, name), "Session.Unlock", key) {
			return
		}
	}
}

// TestPgpoolRoutedToThePrimary: the fix docs/guarantees.md gives a Pgpool-II user whose
// sessions' reads may go to a standby: app_name_redirect_preference_list sends every
// statement of the client's application_name to the primary. With the function-list
// configuration, where lock statements are otherwise balanced, every Manager and every
// transaction lock then holds on the primary: no ErrStandby, nothing on the standby.
func TestPgpoolRoutedToThePrimary(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	pp, sb := pgtest.PgpoolForTest(t, srv, pgtest.PgpoolFunctionList,
		"app_name_redirect_preference_list = 'locker:primary'")
	ctx := ctxT(t)
	standby, err := pgx.Connect(ctx, sb.DSN())
	require.NoError(t, err)
	defer standby.Close(context.Background())
	c := &pgpoolCount{t: t, standby: standby}
	dsn := pgtest.WithPairs(pp.DSN(), "application_name=locker")
	for i := range pgpoolManagers() / 2 {
		name := fmt.Sprintf("%s/%d", t.Name(), i)
		c.xact(ctx, dsn, name)
		c.managed(ctx, dsn, name)
	}
	t.Logf("critical sections on the primary: %d", c.held)
	assert.Zero(t, c.refused+c.newRefused, "lock statements sent to the standby")
	assert.Equal(t, pgpoolManagers()/2*pgpoolRounds()*(4+3), c.held)
}
