package advisory

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The fencing table's layout, and its upgrade from the layout of earlier versions (key
// bigint PRIMARY KEY: a pair and the bigint key of the same 64 bits shared a row). As in
// fence.go, every function, type and operator is qualified with pg_catalog.

const createSQL = `CREATE TABLE IF NOT EXISTS %s (
	key      bigint NOT NULL,
	pair     boolean NOT NULL DEFAULT false,
	token    bigint NOT NULL,
	taken_at pg_catalog.timestamptz NOT NULL DEFAULT pg_catalog.now(),
	PRIMARY KEY (key, pair)
)`

// layoutSQL returns the name and columns of the primary key of table $1: no row if it
// has none, or there is no such table.
const layoutSQL = `SELECT c.conname::pg_catalog.text, ARRAY(SELECT a.attname::pg_catalog.text FROM pg_catalog.pg_attribute a
	WHERE a.attrelid OPERATOR(pg_catalog.=) c.conrelid AND a.attnum OPERATOR(pg_catalog.=) ANY (c.conkey))
FROM pg_catalog.pg_constraint c
WHERE c.conrelid OPERATOR(pg_catalog.=) pg_catalog.to_regclass($1)::pg_catalog.oid AND c.contype OPERATOR(pg_catalog.=) 'p'`

// upgradeNameSQL and upgradeTableSQL serialize creations and upgrades until the
// transaction ends: by the table's name as given, so that concurrent creators do not
// collide in the catalogs (CREATE TABLE IF NOT EXISTS is not safe against itself), then,
// once it exists, by its oid, for callers that spell its name differently.
const (
	upgradeNameSQL  = `SELECT pg_catalog.pg_advisory_xact_lock($1)`
	upgradeTableSQL = `SELECT pg_catalog.pg_advisory_xact_lock($1, pg_catalog.to_regclass($2)::pg_catalog.oid::integer)`
	addPairSQL      = `ALTER TABLE %s ADD COLUMN IF NOT EXISTS pair boolean NOT NULL DEFAULT false`
	addKeySQL       = `ALTER TABLE %s ADD PRIMARY KEY (key, pair)`
	swapKeySQL      = `ALTER TABLE %s DROP CONSTRAINT %s, ADD PRIMARY KEY (key, pair)`
)

// upgradeName is hashed into the key of upgradeNameSQL (with the table's name) and of
// upgradeTableSQL (its high half, the class of a two-int4 key whose object is the oid).
const upgradeName = "advisory: create or upgrade the fencing table "

// fenceLayout is what layoutSQL read.
type fenceLayout struct {
	pk   string   // the primary key's name; "" if none
	cols []string // its columns
}

// current reports whether the table is keyed by (key, pair), as createSQL makes it.
func (f fenceLayout) current() bool {
	slices.Sort(f.cols)
	return slices.Equal(f.cols, []string{"key", "pair"})
}

func readLayout(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table string) (fenceLayout, error) {
	var f fenceLayout
	err := q.QueryRow(ctx, layoutSQL, table).Scan(&f.pk, &f.cols)
	if errors.Is(err, pgx.ErrNoRows) {
		return fenceLayout{}, nil
	}
	return f, err
}

// prepareFenceTable leaves the table current: one statement if it is, else one
// transaction (READ COMMITTED, so that each statement sees what a concurrent upgrade
// committed while it waited) that creates or upgrades it.
func prepareFenceTable(ctx context.Context, conn *pgx.Conn, table string) error {
	f, err := readLayout(ctx, conn, table)
	if err != nil || f.current() {
		return err
	}
	return pgx.BeginTxFunc(ctx, conn, pgx.TxOptions{IsoLevel: pgx.ReadCommitted}, func(tx pgx.Tx) error {
		return upgradeFenceTable(ctx, tx, table)
	})
}

// upgradeFenceTable creates the table if it does not exist, and gives an earlier
// version's table the pair column and the primary key (key, pair), in tx: each old row
// becomes the bigint key's (pair false); a pair whose tokens it counted too goes on
// above it when it first takes one (see tokenSQL).
func upgradeFenceTable(ctx context.Context, tx pgx.Tx, table string) error {
	if _, err := tx.Exec(ctx, upgradeNameSQL, int64(KeyOf(upgradeName+table))); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(createSQL, table)); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, upgradeTableSQL, int32(KeyOf(upgradeName)>>32), table); err != nil {
		return err
	}
	f, err := readLayout(ctx, tx, table)
	if err != nil || f.current() {
		return err
	}
	if _, err := tx.Exec(ctx, fmt.Sprintf(addPairSQL, table)); err != nil {
		return err
	}
	swap := fmt.Sprintf(addKeySQL, table)
	if f.pk != "" {
		swap = fmt.Sprintf(swapKeySQL, table, pgx.Identifier{f.pk}.Sanitize())
	}
	_, err = tx.Exec(ctx, swap)
	return err
}

// fenceTableError is the error for err if it says the fencing table cannot be used, else
// nil: it does not exist (42P01), or it has an earlier version's layout, with no pair
// column (42703) or no primary key on (key, pair) for ON CONFLICT (42P10).
func fenceTableError(table string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return nil
	}
	switch pgErr.Code {
	case "42P01":
		return fmt.Errorf("%w: %s: %w", ErrNoFenceTable, table, err)
	case "42703", "42P10":
		return &outdatedError{table, err}
	}
	return nil
}

// outdatedError is the error of a fencing table with an earlier version's layout. It
// wraps ErrNoFenceTable (the table cannot be used, and CreateFenceTable is the remedy,
// so callers that create the table on ErrNoFenceTable upgrade it too) and the server's
// error, but says in its own words what is wrong.
type outdatedError struct {
	table string
	err   error
}

func (e *outdatedError) Error() string {
	return "advisory: the fencing table " + e.table + " has the layout of an earlier version: " +
		"run Manager.CreateFenceTable or pgadvisory init-fencing to upgrade it: " + e.err.Error()
}

func (e *outdatedError) Unwrap() []error { return []error{ErrNoFenceTable, e.err} }
