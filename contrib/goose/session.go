package advgoose

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
)

// SessionLock takes the lock for a goose Provider installed with goose.WithSessionLocker,
// as [Locker.Lock] does, and then tags conn, the session goose runs its SQL migrations
// and version-table statements on, for the holding: its application_name becomes
// [advisory.Lock.WorkAppName] of its own and it gets the settings of
// [advisory.Lock.WorkOptions] (set_config, for the session). If this process dies
// mid-migration, the next holder's drain finds that session and ends it before migrating.
// The lock itself is not taken on conn but on a connection of the Manager, which is what
// lets its loss be seen at once (see [Locker.Context]). ctx governs all of it; on any
// error nothing is held and conn is left as it was, or untagged if it failed midway.
func (lk *Locker) SessionLock(ctx context.Context, conn *sql.Conn) error {
	if conn == nil {
		panic("advgoose: SessionLock with a nil connection")
	}
	return lk.take(ctx, conn)
}

// SessionUnlock gives conn back its application_name and releases the lock taken by
// SessionLock on conn. The work settings stay on the session (they only make a backend
// whose client died stop sooner). Like [Locker.Unlock], it is bounded by 5 s of its own
// rather than by ctx, returns the loss (wrapping [advisory.ErrLockLost]) first, and
// returns an error wrapping [advisory.ErrNotHeld] when no lock is held for conn.
func (lk *Locker) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	return lk.release(ctx, conn)
}

// tag names conn for the holding, so that the next holder's drain finds it, and gives it
// the settings that make its backend stop soon after this process dies. Every function is
// schema-qualified: a role's search_path cannot replace it.
func (h *holding) tag(ctx context.Context) error {
	if err := h.conn.QueryRowContext(ctx, "SELECT pg_catalog.current_setting('application_name')").Scan(&h.app); err != nil {
		return fmt.Errorf("advgoose: tag goose's connection: %w", err)
	}
	// One set_config per setting, with positional parameters only: goose's *sql.DB may
	// use any PostgreSQL driver (pgx stdlib, lib/pq), and not every one sends arrays.
	calls, args := []string{"pg_catalog.set_config($1, $2, false)"}, []any{"application_name", h.l.WorkAppName(h.app)}
	for _, kv := range strings.Fields(strings.ReplaceAll(h.l.WorkOptions(), "-c ", "")) {
		if k, v, ok := strings.Cut(kv, "="); ok {
			args = append(args, k, v)
			calls = append(calls, fmt.Sprintf("pg_catalog.set_config($%d, $%d, false)", len(args)-1, len(args)))
		}
	}
	_, err := h.conn.ExecContext(ctx, "SELECT "+strings.Join(calls, ", "), args...)
	if err != nil {
		return fmt.Errorf("advgoose: tag goose's connection: %w", h.errWithUntag(ctx, err))
	}
	return nil
}

// errWithUntag restores the application_name after a failed tag, best effort.
func (h *holding) errWithUntag(ctx context.Context, err error) error {
	if uerr := h.untag(ctx); uerr != nil {
		return fmt.Errorf("%w (and %w)", err, uerr)
	}
	return err
}

// untag gives conn back the application_name it had before tag, so that a later holder's
// drain does not take the pooled session for this holding's leftover work.
func (h *holding) untag(ctx context.Context) error {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), unlockTimeout)
	defer cancel()
	_, err := h.conn.ExecContext(uctx, "SELECT pg_catalog.set_config('application_name', $1, false)", h.app)
	if err != nil {
		return fmt.Errorf("advgoose: restore application_name of goose's connection: %w", err)
	}
	return nil
}
