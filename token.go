package advisory

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Fencing tokens: each key has a row in the fencing table, whose counter the holder bumps
// on its own session (so only a holder can bump it) in a transaction whose commit is
// flushed to disk whatever synchronous_commit the server or role sets (so no token is
// handed out twice, across restarts and crashes). See docs/fencing.md for the designs
// compared and what each costs.

// tokenSQL bumps the key's counter on the holding session: $1 the key, $2 the
// connection's ownership token (see ownedBy). No row comes back if it ran on another
// client's backend.
const tokenSQL = `WITH flush AS (SELECT set_config('synchronous_commit', 'on', true))
INSERT INTO %s AS f (key, token) SELECT $1, 1 FROM flush WHERE ` + ownedBy + `
ON CONFLICT (key) DO UPDATE SET token = f.token + 1, taken_at = now() RETURNING token`

// checkSQL reads the key's current token and locks its row until the writer's
// transaction ends, so that no newer token can be taken before the write commits.
const checkSQL = "SELECT token FROM %s WHERE key = $1 FOR SHARE"

const createSQL = `CREATE TABLE IF NOT EXISTS %s (
	key      bigint PRIMARY KEY,
	token    bigint NOT NULL,
	taken_at timestamptz NOT NULL DEFAULT now()
)`

// CreateFenceTable creates the fencing table (see [WithFenceTable]) if it does not exist:
// key bigint primary key, token bigint, taken_at timestamptz. It needs the CREATE
// privilege on the schema; the roles that take and check tokens need INSERT, UPDATE and
// SELECT on the table. It blocks for one statement on a pool connection, governed by ctx.
func (m *Manager) CreateFenceTable(ctx context.Context) error {
	if err := m.enter(); err != nil {
		return err
	}
	defer m.active.Done()
	c, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("advisory: create the fencing table %s: %w", m.set.fenceTable, err)
	}
	defer c.Release()
	clearWarning(c.Conn().PgConn())
	if _, err := c.Exec(ctx, fmt.Sprintf(createSQL, m.set.fenceTable)); err != nil {
		return fmt.Errorf("advisory: create the fencing table %s: %w", m.set.fenceTable, err)
	}
	if n := takeWarning(c.Conn().PgConn()); n != nil {
		return fmt.Errorf("advisory: create the fencing table %s: %w", m.set.fenceTable, unconfirmed("its commit", n))
	}
	return nil
}

// Token returns the lock's fencing token: a number greater than every token any earlier
// holder of the same key took, in any process, across server restarts and crashes (not
// across a failover to a standby that had not received the last tokens: use synchronous
// replication for that). Hand it to every write the lock protects; the store refuses a
// write whose token is smaller than one it has seen ([Manager.CheckToken] does that for
// this database).
//
// The first call takes the token: one statement on the lock's connection that updates the
// key's row in the fencing table and waits for its commit to be flushed (about one disk
// flush). Later calls return the same token at once. ctx governs that statement; a
// cancelled call takes no token and keeps the lock. A token whose commit the server could
// not confirm (ctx ended while the commit waited for a synchronous standby: the server
// then commits locally with a WARNING) is never returned: the error wraps
// [ErrCommitUnconfirmed], the lock is kept, and the next call takes a newer token. It fails with an error wrapping
// [ErrLockLost] or [ErrNotHeld] if the lock has ended, even if a token was taken before,
// and with one wrapping [ErrNoFenceTable] if the table does not exist.
//
// On a shared lock it returns an error wrapping [ErrSharedToken], whatever the lock's
// state, sends nothing and keeps the lock: shared holders hold at once, so no token could
// say which is newest.
func (l *Lock) Token(ctx context.Context) (int64, error) {
	s := l.s
	if s.shared {
		return 0, &opError{"take a fencing token of", s.describe(), ErrSharedToken}
	}
	if tok := s.fenceToken.Load(); tok != 0 {
		select {
		case <-s.done: // the holding has ended: its token no longer fences anything
			return 0, s.endErr()
		default:
			return tok, nil
		}
	}
	if err := s.beginTx(ctx); err != nil {
		return 0, err
	}
	tok := s.fenceToken.Load() // taken meanwhile by a concurrent call
	var err error
	if tok == 0 {
		clearWarning(s.pg)
		err = s.pc.QueryRow(ctx, fmt.Sprintf(tokenSQL, s.m.set.fenceTable), int64(s.key), s.token).Scan(&tok)
		if n := takeWarning(s.pg); err == nil && n != nil {
			err = unconfirmed("the fencing token's commit", n)
		}
	}
	if errors.Is(err, pgx.ErrNoRows) {
		err = s.foreignError()
	}
	if lerr := s.endTx(err); lerr != nil {
		return 0, lerr
	}
	if err != nil {
		return 0, tokenError(ctx, s.m.set.fenceTable, err)
	}
	s.fenceToken.Store(tok)
	return tok, nil
}

func tokenError(ctx context.Context, table string, err error) error {
	if nerr := noFenceTable(table, err); nerr != nil {
		return nerr
	}
	return fmt.Errorf("advisory: take a fencing token: %w", withCtxErr(ctx, err))
}

// noFenceTable is the error for err if it says the fencing table does not exist
// (42P01), else nil.
func noFenceTable(table string, err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return fmt.Errorf("%w: %s: %w", ErrNoFenceTable, table, err)
	}
	return nil
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
// It runs one statement on tx (SELECT token FROM <table> WHERE key = $1 FOR SHARE),
// governed by ctx. Names are namespaced as by the Manager's Lock. A token that no holder
// took returns an error wrapping ErrStaleToken too: never write unfenced.
func (m *Manager) CheckToken(ctx context.Context, tx pgx.Tx, name string, token int64) error {
	t, err := m.named(name, false)
	if err != nil {
		return err
	}
	var current int64
	err = tx.QueryRow(ctx, fmt.Sprintf(checkSQL, m.set.fenceTable), int64(t.key)).Scan(&current)
	switch nerr := noFenceTable(m.set.fenceTable, err); {
	case nerr != nil:
		return nerr
	case errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("%w: %s: no token was ever taken", ErrStaleToken, describe(t.key, t.name, false))
	case err != nil:
		return fmt.Errorf("advisory: check the fencing token of %s: %w", describe(t.key, t.name, false), err)
	case current != token:
		return fmt.Errorf("%w: %s: token %s, newest %s", ErrStaleToken, describe(t.key, t.name, false),
			strconv.FormatInt(token, 10), strconv.FormatInt(current, 10))
	}
	return nil
}
