package advisory

import (
	"context"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"
)

// XactLock takes the lock with the given name inside the caller's transaction
// (pg_advisory_xact_lock), blocking on the server until it is held or ctx ends. The lock
// is released when tx commits or rolls back; there is no Unlock. tx may come from any pool
// or connection, not only a Manager's.
//
// ctx governs the wait, as pgx's ctx handling does for any statement on tx (by default a
// cancelled statement closes tx's connection, ending the transaction). On any error the
// transaction is aborted: roll it back, and whatever the statement may have been granted
// goes with it. The statement proves that it runs on a primary: one that a load balancer
// (Pgpool-II) sent to a hot standby takes nothing there and returns an error wrapping
// [ErrStandby]. An invalid name returns an error wrapping
// [ErrInvalidKey] before anything is sent. It panics if tx is nil.
func XactLock(ctx context.Context, tx pgx.Tx, name string) error {
	return xactLock(ctx, tx, name, false)
}

// XactLockShared is [XactLock] in shared mode (pg_advisory_xact_lock_shared).
func XactLockShared(ctx context.Context, tx pgx.Tx, name string) error {
	return xactLock(ctx, tx, name, true)
}

// TryXactLock is [XactLock] without waiting (pg_try_advisory_xact_lock): if another
// session holds the lock it returns a *[LockedError] wrapping [ErrLocked], and the
// transaction goes on unharmed.
func TryXactLock(ctx context.Context, tx pgx.Tx, name string) error {
	return tryXactLock(ctx, tx, name, false)
}

// TryXactLockShared is [TryXactLock] in shared mode (pg_try_advisory_xact_lock_shared).
func TryXactLockShared(ctx context.Context, tx pgx.Tx, name string) error {
	return tryXactLock(ctx, tx, name, true)
}

func xactFunc(base string, shared bool) string {
	if shared {
		return base + "_shared"
	}
	return base
}

func xactLock(ctx context.Context, tx pgx.Tx, name string, shared bool) error {
	t, err := xactTarget(tx, name, shared)
	if err != nil {
		return err
	}
	var held pgtype.Bool
	sql := nameComment(name) + xactSelect + xactFunc("pg_catalog.pg_advisory_xact_lock", shared) + "($1) IS NOT NULL END"
	if err := tx.QueryRow(ctx, sql, int64(t.key)).Scan(&held); err != nil {
		return &opError{"transaction lock", describe(t.key, name, false), err}
	}
	if !held.Valid {
		return &opError{"transaction lock", describe(t.key, name, false), standbyError()}
	}
	return nil
}

// xactSelect starts a transaction lock statement: its lock function runs only on a
// primary, and the statement returns NULL on a standby (see statements_primary.go).
const xactSelect = "SELECT CASE WHEN " + onPrimary + " THEN "

func tryXactLock(ctx context.Context, tx pgx.Tx, name string, shared bool) error {
	t, err := xactTarget(tx, name, shared)
	if err != nil {
		return err
	}
	var ok pgtype.Bool
	sql := nameComment(name) + xactSelect + xactFunc("pg_catalog.pg_try_advisory_xact_lock", shared) + "($1) END"
	if err := tx.QueryRow(ctx, sql, int64(t.key)).Scan(&ok); err != nil {
		return &opError{"transaction try lock", describe(t.key, name, false), err}
	}
	if !ok.Valid {
		return &opError{"transaction try lock", describe(t.key, name, false), standbyError()}
	}
	if !ok.Bool {
		return &LockedError{Key: t.key, Name: name}
	}
	return nil
}

func xactTarget(tx pgx.Tx, name string, shared bool) (target, error) {
	if tx == nil {
		panic("advisory: transaction lock with a nil pgx.Tx")
	}
	return named(name, shared)
}
