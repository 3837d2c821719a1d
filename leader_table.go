package advisory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// As everywhere (see statements.go), every function, type and operator is qualified with
// pg_catalog.
//
// The leader table holds one row per lock whose holder published a value: the holding's
// session (pid and backend_start) and the value. A row is believed only while that very
// session holds the lock exclusively, as pg_locks shows: a crashed leader's row is
// ignored until the next leader publishes over it, so nothing needs cleaning up.

const createLeaderSQL = `CREATE TABLE IF NOT EXISTS %s (
	key bigint NOT NULL,
	pair boolean NOT NULL,
	pid integer NOT NULL,
	backend_start pg_catalog.timestamptz NOT NULL,
	value pg_catalog.text NOT NULL,
	published_at pg_catalog.timestamptz NOT NULL,
	PRIMARY KEY (key, pair))`

// leaderHeldSQL yields the holding session's backend_start, on the session itself, if it
// holds the lock exclusively: $1 the payload, $2 the ownership token, $3, $4, $5 the
// lock's pg_locks classid, objid and objsubid.
const leaderHeldSQL = `WITH held AS (
SELECT a.backend_start FROM pg_catalog.pg_stat_activity a
WHERE a.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid() AND ` + ownedBy + `
  AND EXISTS (SELECT FROM pg_catalog.pg_locks l
    WHERE l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
      AND l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted
      AND l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'
      AND l.database OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_database
        WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
      AND l.classid OPERATOR(pg_catalog.=) $3 AND l.objid OPERATOR(pg_catalog.=) $4
      AND l.objsubid OPERATOR(pg_catalog.=) $5))`

// announceSQL sends the notification if the session holds the lock (see leaderHeldSQL).
const announceSQL = leaderHeldSQL + `
SELECT pg_catalog.pg_notify('` + leaderChannel + `', $1) FROM held`

// publishSQL also stores the value $6 for the key $7 (pair $8) in the leader table %s.
const publishSQL = leaderHeldSQL + `,
ins AS (INSERT INTO %s AS t (key, pair, pid, backend_start, value, published_at)
  SELECT $7, $8, pg_catalog.pg_backend_pid(), held.backend_start, $6, pg_catalog.now() FROM held
  ON CONFLICT (key, pair) DO UPDATE SET pid = excluded.pid, backend_start = excluded.backend_start,
    value = excluded.value, published_at = excluded.published_at
  RETURNING 1)
SELECT pg_catalog.pg_notify('` + leaderChannel + `', $1) FROM ins`

// leaderValueSQL reads the value the holding session $3 (started at $4) published.
const leaderValueSQL = `SELECT value, published_at FROM %s
WHERE key OPERATOR(pg_catalog.=) $1 AND pair OPERATOR(pg_catalog.=) $2
  AND pid OPERATOR(pg_catalog.=) $3 AND backend_start OPERATOR(pg_catalog.=) $4`

// createLeaderName serializes concurrent creations (CREATE TABLE IF NOT EXISTS alone can
// fail on a concurrent one).
const createLeaderName = "advisory: create the leader table "

// CreateLeaderTable creates the leader table of [WithLeaderTable] if it does not exist:
// key bigint, pair boolean, pid integer, backend_start timestamptz, value text,
// published_at timestamptz, primary key (key, pair). Creating it needs the CREATE
// privilege on the schema; leaders need INSERT and UPDATE on it, followers SELECT.
// Concurrent calls, from any process, are safe. It blocks for one transaction on a pool
// connection, governed by ctx; on failure nothing has changed. Without WithLeaderTable it
// returns [ErrNoLeaderTable].
func (m *Manager) CreateLeaderTable(ctx context.Context) error {
	table := m.set.leaderTable
	if table == "" {
		return fmt.Errorf("%w: the Manager has no WithLeaderTable", ErrNoLeaderTable)
	}
	if err := m.enter(); err != nil {
		return err
	}
	defer m.active.Done()
	c, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("advisory: create the leader table %s: %w", table, err)
	}
	defer c.Release()
	err = pgx.BeginFunc(ctx, c.Conn(), func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, upgradeNameSQL, int64(KeyOf(createLeaderName+table))); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, fmt.Sprintf(createLeaderSQL, table))
		return err
	})
	if err != nil {
		return fmt.Errorf("advisory: create the leader table %s: %w", table, err)
	}
	return nil
}

// publish runs announceSQL, or publishSQL with value if withValue, on the holding
// session, named (see pin.named: Holders still shows the lock's name after it). It blocks for one statement, governed by ctx; the lock is kept on failure.
func (p *pin) publish(ctx context.Context, withValue bool, value string) error {
	classid, objid, subid := pgLocksKey(p.key, p.pair)
	payload := leaderPayload(gateKey{p.key, p.pair})
	err, ended := p.onHeld(ctx, func() error {
		var sql string
		args := []any{payload, p.token, classid, objid, subid}
		if withValue {
			sql = fmt.Sprintf(publishSQL, p.m.set.leaderTable)
			args = append(args, value, int64(p.key), p.pair)
		} else {
			sql = announceSQL
		}
		n, err := p.lease.announce(p, ctx, sql, args)
		if err == nil && n == 0 {
			err = p.foreignError()
		}
		return err
	})
	switch {
	case ended != nil:
		return ended
	case err != nil:
		return withCtxErr(ctx, leaderTableError(p.m.set.leaderTable, err))
	}
	return nil
}

// announce is sessionLease's: sql (announceSQL or publishSQL, with its args) on the
// holding session, whose connection the caller has borrowed (see onHeld), named (see
// pin.named). It returns how many rows it returned: none if the statement did nothing.
func (sessionLease) announce(p *pin, ctx context.Context, sql string, args []any) (int, error) {
	clearWarning(p.pg)
	n, err := countRows(p.pc.Query(ctx, p.named(sql), args...))
	if w := takeWarning(p.pg); err == nil && w != nil {
		err = unconfirmed("the announcement's commit", w)
	}
	return n, err
}

// countRows reads and counts the rows of a query.
func countRows(rows pgx.Rows, err error) (int, error) {
	if err != nil {
		return 0, err
	}
	n := 0
	for rows.Next() {
		n++
	}
	return n, rows.Err() // closes rows
}

// A published value belongs to the holding that published it: rows are matched on the
// holding's server session (pid, backend_start), which a later holding of the same key on
// the same session would match too (the session back in the pool and locking again, a
// Do after LeadAs stepped down, an in-process handoff). A holding that ends by Unlock or
// Close is alive to clean up, so its release first withdraws the value it published
// (withdrawValue), and a published Lock is never handed off in process (see passOn).
// A holding lost with its session leaves a row that no live session matches.

// withdrawSQL deletes the value of the key $1 (pair $2) published from the backend $3.
const withdrawSQL = `DELETE FROM %s WHERE key OPERATOR(pg_catalog.=) $1 AND pair OPERATOR(pg_catalog.=) $2
  AND pid OPERATOR(pg_catalog.=) $3`

// withdrawValue withdraws the value the holding published, as its release begins (the
// connection is the release's). If that cannot be confirmed, the connection is retired:
// closed at the end of the release, so that no later holding can run on its session.
func (p *pin) withdrawValue() {
	if !p.handle.announced.Load() || p.m.set.leaderTable == "" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if err := p.lease.withdraw(p, ctx, fmt.Sprintf(withdrawSQL, p.m.set.leaderTable)); err != nil {
		p.retire.Store(true)
	}
}

// withdraw is sessionLease's: on the holding session itself.
func (sessionLease) withdraw(p *pin, ctx context.Context, sql string) error {
	_, err := p.pc.Exec(ctx, sql, int64(p.key), p.pair, int32(p.pid))
	return err
}

// leaderTableError wraps err with ErrNoLeaderTable if it says the table does not exist.
func leaderTableError(table string, err error) error {
	if sqlState(err) == "42P01" {
		return fmt.Errorf("%w: %s: %w", ErrNoLeaderTable, table, err)
	}
	return err
}

// readLeader reads who holds t exclusively, how many wait, and, with a leader table,
// what the holder published. Two queries at most, on pool connections, governed by ctx.
func (m *Manager) readLeader(ctx context.Context, t target, name string) (Leader, error) {
	hs, err := m.holders(ctx, false, t.key, t.pair)
	if err != nil {
		return Leader{}, err
	}
	ld := Leader{Name: name, Key: t.key}
	for _, h := range hs {
		switch {
		case !h.Granted:
			ld.Waiting++
		case !h.Shared:
			ld.Elected, ld.Holder = true, h
		}
	}
	if !ld.Elected || m.set.leaderTable == "" || ld.Holder.BackendStart.IsZero() {
		return ld, nil
	}
	var published time.Time
	err = m.pool.QueryRow(ctx, fmt.Sprintf(leaderValueSQL, m.set.leaderTable), int64(t.key), t.pair,
		int32(ld.Holder.PID), ld.Holder.BackendStart).Scan(&ld.Value, &published)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return ld, nil
	case err != nil:
		return Leader{}, fmt.Errorf("advisory: read the leader's value: %w", leaderTableError(m.set.leaderTable, err))
	}
	ld.Published = published
	return ld, nil
}
