package advisory

import (
	"context"
	"fmt"
	"time"
)

// A Holder is one session that holds or waits for an advisory lock, as pg_locks and
// pg_stat_activity show it.
type Holder struct {
	// Key is the lock's key. For a lock taken in the two-int4 form (pg_advisory_lock(a, b))
	// Pair is true and Key is a<<32 | b, a key space of its own.
	Key  Key
	Pair bool
	// Name is the name the lock was taken with, when this library took it (it records the
	// name in the statement text); "" when unknown. A session whose statements show no
	// name (a lock taken by key, or by a Manager made WithoutNamesInActivity) is given
	// the whole name another session of the same key shows, if one does. For a name
	// longer than about 800 bytes (less if it is not ASCII) only its start is recorded,
	// since the server keeps only the first track_activity_query_size bytes (1024 by
	// default) of a statement's text: Name is then that start and NameTruncated is true.
	Name string
	// NameTruncated reports that Name is only the start of the lock's name. Unlike a
	// whole name, which is shown only if it hashes to Key, a start cannot be checked
	// against the key: it is what the holder's statement claimed.
	NameTruncated bool
	Granted       bool // holds the lock; false: waits for it
	Shared        bool // shared mode (pg_advisory_lock_shared)
	PID           uint32
	// ApplicationName, ClientAddr (host:port, "" over a Unix socket), BackendStart and
	// State ("idle", "active", ...) come from pg_stat_activity; they are empty where the
	// caller may not see other roles' sessions.
	ApplicationName string
	ClientAddr      string
	BackendStart    time.Time
	State           string
	// Since is when the wait began (waiters), or, for holders, when the server granted the
	// lock to the session: for a lock taken through this library, as its holder recorded
	// it (its clock) in the text of the statements it ran since; else when the session's
	// last statement ended. A lock passed between Lock calls of one Manager without
	// leaving the session ([WithLocalHandoff]) keeps the Since of the run: the server
	// sees one holding, and every holding of the run records the run's grant.
	Since time.Time
}

const holdersSQL = `
SELECT l.classid::bigint OPERATOR(pg_catalog.<<) 32 OPERATOR(pg_catalog.|) l.objid::bigint,
       l.objsubid OPERATOR(pg_catalog.=) 2, l.granted, l.mode OPERATOR(pg_catalog.=) 'ShareLock', l.pid,
       coalesce(a.application_name, ''),
       coalesce(pg_catalog.host(a.client_addr) OPERATOR(pg_catalog.||) ':' OPERATOR(pg_catalog.||) a.client_port::pg_catalog.text, ''),
       a.backend_start, coalesce(a.state, ''),
       CASE WHEN l.granted THEN coalesce(a.state_change, a.query_start) ELSE a.query_start END,
       coalesce(a.query, '')
FROM pg_catalog.pg_locks l LEFT JOIN pg_catalog.pg_stat_activity a ON a.pid OPERATOR(pg_catalog.=) l.pid
WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory'
  AND l.database OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_database
    WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
  AND ($1::boolean OR (l.classid OPERATOR(pg_catalog.=) $2 AND l.objid OPERATOR(pg_catalog.=) $3
    AND l.objsubid OPERATOR(pg_catalog.=) $4))
ORDER BY l.classid, l.objid, l.objsubid, l.granted DESC, 10, l.pid`

// Holders returns the sessions that hold or wait for the lock with the given name (in the
// Manager's namespace, if it has one), holders first, then waiters in the order they
// began waiting. It runs one query on a
// pool connection; ctx governs it. An invalid name returns an error wrapping
// [ErrInvalidKey].
func (m *Manager) Holders(ctx context.Context, name string) ([]Holder, error) {
	t, err := m.named(name, false)
	if err != nil {
		return nil, err
	}
	return m.holders(ctx, false, t.key, false)
}

// HoldersKey is [Manager.Holders] for a raw 64-bit key.
func (m *Manager) HoldersKey(ctx context.Context, key Key) ([]Holder, error) {
	return m.holders(ctx, false, key, false)
}

// AllHolders returns every session holding or waiting for any advisory lock in the
// database, grouped by key.
func (m *Manager) AllHolders(ctx context.Context) ([]Holder, error) {
	return m.holders(ctx, true, 0, false)
}

// holders runs holdersSQL: every advisory lock of the database (all), or the one key.
func (m *Manager) holders(ctx context.Context, all bool, key Key, pair bool) ([]Holder, error) {
	if err := m.enter(); err != nil {
		return nil, err
	}
	defer m.active.Done()
	classid, objid, subid := pgLocksKey(key, pair)
	rows, err := m.pool.Query(ctx, holdersSQL, all, classid, objid, subid)
	if err != nil {
		return nil, fmt.Errorf("advisory: list holders: %w", err)
	}
	defer rows.Close()
	var out []Holder
	for rows.Next() {
		var h Holder
		var key int64
		var start, since *time.Time
		var query string
		if err := rows.Scan(&key, &h.Pair, &h.Granted, &h.Shared, &h.PID, &h.ApplicationName,
			&h.ClientAddr, &start, &h.State, &since, &query); err != nil {
			return nil, fmt.Errorf("advisory: list holders: %w", err)
		}
		h.Key = Key(key)
		if start != nil {
			h.BackendStart = *start
		}
		if since != nil {
			h.Since = *since
		}
		if name, prefix, granted, ok := nameFromQuery(query); ok && !h.Pair && (prefix || KeyOf(name) == h.Key) {
			h.Name, h.NameTruncated = name, prefix
			if h.Granted && !granted.IsZero() {
				h.Since = granted
			}
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("advisory: list holders: %w", err)
	}
	nameByKey(out)
	return out, nil
}

// nameByKey gives the sessions of a key whose statements show no name (a lock taken by
// key, or by a Manager made WithoutNamesInActivity) the name another session of the key
// shows: a whole name, which holders checked hashes to the key, so it is the lock's
// name. A name's start (NameTruncated) cannot be checked and is not passed on; a lock of
// the two-int4 form (Pair) shows no name, so none is passed on there. hs is in
// holdersSQL's order: the rows of one key and form are together.
func nameByKey(hs []Holder) {
	for i := 0; i < len(hs); {
		j, name := i, ""
		for ; j < len(hs) && hs[j].Key == hs[i].Key && hs[j].Pair == hs[i].Pair; j++ {
			if hs[j].Name != "" && !hs[j].NameTruncated {
				name = hs[j].Name
			}
		}
		for ; i < j; i++ {
			if hs[i].Name == "" {
				hs[i].Name = name
			}
		}
	}
}
