package advmigrate

import (
	"bytes"
	"errors"
	"io"
	"strings"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/sqlscan"
)

// runTagged runs a migration behind a transaction pooler with a statement first that
// gives its session, for the migration's own transaction only, the holding's tag as its
// application_name: through a transaction pooler the server session a migration runs on
// is the holding's work for that transaction's length, and a session setting would stay
// on it for other clients. It holds for a migration run as one statement list (the
// drivers' default: one implicit transaction, which a BEGIN in the file makes explicit,
// keeping the setting), not for one split into statements of their own
// (MultiStatementEnabled).
//
// The tag makes the migration two statements, which PostgreSQL runs as one implicit
// transaction block: a statement that cannot run in one (CREATE INDEX CONCURRENTLY, DROP
// INDEX CONCURRENTLY, VACUUM, ...) fails there with SQLSTATE 25001 before anything of it
// ran. When the migration is that one statement, it is run again untagged, alone, as the
// plain driver runs it. Nothing could have committed: the tag's transaction held only the
// tag. The untagged run is no holding's work to a later drain (see the package doc).
func (d *Driver) runTagged(l *advisory.Lock, migration io.Reader) error {
	body, err := io.ReadAll(migration)
	if err != nil {
		return err
	}
	head := "SELECT pg_catalog.set_config('application_name', " + literal(l.WorkAppName("")) + ", true);\n"
	err = d.inner.Run(io.MultiReader(strings.NewReader(head), bytes.NewReader(body)))
	if inTransactionBlock(err) && len(sqlscan.Split(string(body))) == 1 {
		err = d.inner.Run(bytes.NewReader(body))
	}
	return err
}

// inTransactionBlock reports whether err is the server's "cannot run inside a
// transaction block" (SQLSTATE 25001, active_sql_transaction), as golang-migrate's
// drivers return it (database.Error, which does not unwrap).
func inTransactionBlock(err error) bool {
	var de database.Error
	if errors.As(err, &de) {
		err = de.OrigErr
	}
	var pde *database.Error
	if errors.As(err, &pde) {
		err = pde.OrigErr
	}
	var pg *pgconn.PgError
	return errors.As(err, &pg) && pg.Code == "25001"
}
