package advisory

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Fencing tokens: each lock has a row in the fencing table, keyed by its full identity
// (its key, and whether it is a two-int4 pair: LockPair({7, 9}) and LockKey(7<<32|9) are
// different PostgreSQL locks, so they count tokens apart). The holder bumps the row's
// counter on its own session (so only a holder can bump it) in a transaction whose commit
// is flushed to disk whatever synchronous_commit the server or role sets (so no token is
// handed out twice, across restarts and crashes). See docs/fencing.md for the designs
// compared and what each costs.
//
// Every statement here names server functions, types and operators with pg_catalog: a
// role whose search_path puts a schema writable by others ahead of pg_catalog would
// otherwise call that schema's now(), set_config, = or + (the CVE-2018-1058 pattern),
// and a forged = could accept a stale token.

// tokenSQL bumps the lock's counter on the holding session: $1 the key, $2 the
// connection's ownership token (see ownedBy), $3 whether the key is a pair. No row comes
// back if it ran on another client's backend. A pair's first token is greater than the
// bigint key's newest: in a table of an earlier version, upgraded, the key's row also
// counts the tokens the pair took before (they shared it), and the pair must go on above
// them.
const tokenSQL = `WITH flush AS (SELECT pg_catalog.set_config('synchronous_commit', 'on', true))
INSERT INTO %[1]s AS f (key, pair, token)
SELECT $1, $3, GREATEST(1 OPERATOR(pg_catalog.+) coalesce((SELECT k.token FROM %[1]s k
	WHERE $3 AND k.key OPERATOR(pg_catalog.=) $1 AND NOT k.pair), 0), ` + timelineFloor + `)
FROM flush WHERE ` + ownedBy + `
ON CONFLICT (key, pair) DO UPDATE SET token = GREATEST(f.token OPERATOR(pg_catalog.+) 1, ` + timelineFloor + `),
	taken_at = pg_catalog.now()
RETURNING token`

// checkSQL reads the lock's current token and the server's timeline floor (see
// fence_timeline.go), and locks the token's row until the writer's transaction ends, so
// that no newer token can be taken before the write commits.
const checkSQL = `SELECT token, ` + timelineFloor + ` FROM %s WHERE key OPERATOR(pg_catalog.=) $1 ` +
	`AND pair OPERATOR(pg_catalog.=) $2 FOR SHARE`

// CreateFenceTable creates the fencing table (see [WithFenceTable]) if it does not
// exist, one row per lock that took a token: key bigint, pair boolean (true for a
// [Pair] key), token bigint, taken_at timestamptz, primary key (key, pair). A table of an
// earlier version (key bigint primary key, no pair column) is upgraded in place, keeping
// its tokens: that needs ownership of the table, creating it the CREATE privilege on the
// schema; the roles that take and check tokens need INSERT, UPDATE and SELECT on it.
// Concurrent calls, from any process, are safe: creation and upgrade are serialized on
// the server.
//
// It blocks on a pool connection, governed by ctx: one statement if the table is already
// current; else one transaction that creates or upgrades it, which waits for a
// concurrent creation or upgrade and for the table's current users. On failure nothing
// has changed (the transaction is rolled back), except after an error wrapping
// [ErrCommitUnconfirmed]: the change committed locally, unconfirmed.
func (m *Manager) CreateFenceTable(ctx context.Context) error {
	if err := m.enter(); err != nil {
		return err
	}
	defer m.active.Done()
	c, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("advisory: create or upgrade the fencing table %s: %w", m.set.fenceTable, err)
	}
	defer c.Release()
	clearWarning(c.Conn().PgConn())
	err = prepareFenceTable(ctx, c.Conn(), m.set.fenceTable)
	if n := takeWarning(c.Conn().PgConn()); err == nil && n != nil {
		err = unconfirmed("its commit", n)
	}
	if err != nil {
		return fmt.Errorf("advisory: create or upgrade the fencing table %s: %w", m.set.fenceTable, err)
	}
	return nil
}

// Token returns the lock's fencing token: a number greater than every token an earlier
// holder of the same key took, in any process, across restarts, crashes and promotions
// (a promoted server's tokens start above its old timeline's, synchronous replication or
// not: see docs/fencing.md, "Failover"). Hand it to every write the lock protects;
// [Manager.CheckToken] refuses a stale one in this database. docs/fencing.md has the full
// contract.
//
// The first call runs one statement on the lock's connection, governed by ctx, that bumps
// the key's row in the fencing table and waits for its commit to be flushed; later calls
// return the same token at once. On failure no token is returned and the lock is kept: an
// error wraps [ErrCommitUnconfirmed] (the server could not confirm the commit), ctx's
// error, [ErrNoFenceTable] (missing, or an earlier version's layout), [ErrSharedToken] (a
// shared lock has no token), or the lock's end ([ErrLockLost], [ErrNotHeld]). A re-entered
// Lock returns its holding's token ([ErrNotReentrant] at once while a BeginFunc of the
// holding runs fn).
func (l *Lock) Token(ctx context.Context) (int64, error) {
	// A shared lock has no token: said before a re-entered handle's own checks (its end,
	// a BeginFunc in progress), after a shared session's refusal.
	if l.Shared() && !l.SharesSession() {
		return 0, &opError{"take a fencing token of", l.s.describe(), ErrSharedToken}
	}
	s, err := l.own("take a fencing token of", true)
	if err != nil {
		return 0, err
	}
	if tok := s.fenceToken.Load(); tok != 0 {
		select {
		case <-s.done: // the holding has ended: its token no longer fences anything
			return 0, s.endErr()
		default:
			return tok, nil
		}
	}
	var tok int64
	err, ended := s.onHeld(ctx, func() error {
		if tok = s.fenceToken.Load(); tok != 0 { // taken meanwhile by a concurrent call
			return nil
		}
		var err error
		tok, err = s.lease.bumpToken(s, ctx)
		return err
	})
	switch {
	case ended != nil:
		return 0, ended
	case err != nil:
		return 0, tokenError(ctx, s.m.set.fenceTable, err)
	}
	s.fenceToken.Store(tok)
	return tok, nil
}

// bumpToken is sessionLease's: tokenSQL on the holding session, whose connection the
// caller has borrowed (see onHeld), and whose commit is the token's.
func (sessionLease) bumpToken(p *pin, ctx context.Context) (int64, error) {
	var tok int64
	clearWarning(p.pg)
	err := p.pc.QueryRow(ctx, p.named(fmt.Sprintf(tokenSQL, p.m.set.fenceTable)), int64(p.key), p.token, p.pair).Scan(&tok)
	if n := takeWarning(p.pg); err == nil && n != nil {
		err = unconfirmed("the fencing token's commit", n)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = p.foreignError()
	}
	return tok, err
}

func tokenError(ctx context.Context, table string, err error) error {
	if ferr := fenceTableError(table, err); ferr != nil {
		return ferr
	}
	return fmt.Errorf("advisory: take a fencing token: %w", withCtxErr(ctx, err))
}

// CheckToken fences a write in this database made on any connection, not only the lock's:
// call it in the writer's transaction tx, before the write, with the lock's name and the
// token its holder took ([Lock.Token]). It returns nil if token is still the newest
// token of the lock, and then keeps any newer holder from taking a token until tx ends,
// so the write commits before a newer holder's writes can begin. It returns an error
// wrapping [ErrStaleToken] if a newer holder has taken a token: roll tx back. It works at
// every isolation level (under REPEATABLE READ or SERIALIZABLE a concurrent newer token
// fails tx with a serialization error instead, which refuses the write too).
//
// It runs one statement on tx (SELECT token FROM <table> WHERE key = $1 AND pair = $2
// FOR SHARE), which waits for a newer holder's Token being committed; ctx governs it.
// Names are namespaced as by the Manager's Lock. A token that no holder took returns an
// error wrapping ErrStaleToken too: never write unfenced. A table that does not exist or
// has an earlier version's layout returns one wrapping [ErrNoFenceTable]. After any
// error, roll tx back.
func (m *Manager) CheckToken(ctx context.Context, tx pgx.Tx, name string, token int64) error {
	t, err := m.named(name, false)
	if err != nil {
		return err
	}
	return m.checkToken(ctx, tx, t, token)
}

// CheckTokenKey is [Manager.CheckToken] for a token of a raw 64-bit key's lock
// ([Manager.LockKey]).
func (m *Manager) CheckTokenKey(ctx context.Context, tx pgx.Tx, key Key, token int64) error {
	return m.checkToken(ctx, tx, target{key: key}, token)
}

// CheckTokenPair is [Manager.CheckToken] for a token of a two-int4 key's lock
// ([Manager.LockPair]): a counter apart from the bigint key of the same 64 bits.
func (m *Manager) CheckTokenPair(ctx context.Context, tx pgx.Tx, p Pair, token int64) error {
	return m.checkToken(ctx, tx, target{key: p.key(), pair: true}, token)
}

// checkToken is CheckToken, CheckTokenKey and CheckTokenPair for the lock t.
func (m *Manager) checkToken(ctx context.Context, tx pgx.Tx, t target, token int64) error {
	var current, floor int64
	err := tx.QueryRow(ctx, fmt.Sprintf(checkSQL, m.set.fenceTable), int64(t.key), t.pair).Scan(&current, &floor)
	what := describe(t.key, t.name, t.pair)
	switch ferr := fenceTableError(m.set.fenceTable, err); {
	case ferr != nil:
		return ferr
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s: no token was ever taken", ErrStaleToken, what)
	case err != nil:
		return fmt.Errorf("advisory: check the fencing token of %s: %w", what, err)
	case current != token:
		return fmt.Errorf("%w: %s: token %s, newest %s", ErrStaleToken, what,
			strconv.FormatInt(token, 10), strconv.FormatInt(current, 10))
	case token < floor:
		return fmt.Errorf("%w: %s: token %s was taken on timeline %d, before the promotion of this server "+
			"(timeline %d): its lock was on the old primary", ErrStaleToken, what, strconv.FormatInt(token, 10),
			timelineOf(token), timelineOf(floor))
	}
	return nil
}
