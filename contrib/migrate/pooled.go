package advmigrate

import (
	"bytes"
	"errors"
	"io"
	"strings"

	"github.com/golang-migrate/migrate/v4/database"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory"
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
	if inTransactionBlock(err) && statements(string(body)) == 1 {
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

// statements counts the statements of a PostgreSQL script: the stretches between
// top-level semicolons that hold more than white space and comments. String constants
// ('...', E'...'), quoted identifiers, dollar quotes and comments (nested /* */ ones too)
// are skipped whole, so a semicolon inside them separates nothing.
func statements(s string) int {
	n, content := 0, false
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == ';':
			if content {
				n++
			}
			content = false
			i++
		case strings.HasPrefix(s[i:], "--"):
			if j := strings.IndexByte(s[i:], '\n'); j >= 0 {
				i += j + 1
			} else {
				i = len(s)
			}
		case strings.HasPrefix(s[i:], "/*"):
			i = skipComment(s, i)
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			i++
		default:
			content = true
			i = skipToken(s, i)
		}
	}
	if content {
		n++
	}
	return n
}

// skipComment returns the index after the (nested) block comment at s[i].
func skipComment(s string, i int) int {
	depth := 0
	for i < len(s) {
		switch {
		case strings.HasPrefix(s[i:], "/*"):
			depth, i = depth+1, i+2
		case strings.HasPrefix(s[i:], "*/"):
			depth, i = depth-1, i+2
			if depth == 0 {
				return i
			}
		default:
			i++
		}
	}
	return i
}

// skipToken returns the index after the quoted constant, identifier or dollar quote at
// s[i], or after s[i] alone.
func skipToken(s string, i int) int {
	c := s[i]
	switch {
	case c == '\'':
		escapes := i > 0 && (s[i-1] == 'E' || s[i-1] == 'e') && (i < 2 || !identChar(s[i-2]))
		return skipQuoted(s, i, '\'', escapes)
	case c == '"':
		return skipQuoted(s, i, '"', false)
	case c == '$' && (i == 0 || !identChar(s[i-1])):
		j := i + 1
		for j < len(s) && identChar(s[j]) && s[j] != '$' {
			j++
		}
		if j < len(s) && s[j] == '$' && (j == i+1 || s[i+1] < '0' || s[i+1] > '9') {
			tag := s[i : j+1]
			if k := strings.Index(s[j+1:], tag); k >= 0 {
				return j + 1 + k + len(tag)
			}
			return len(s)
		}
	}
	return i + 1
}

// skipQuoted returns the index after the constant or identifier quoted with q at s[i]; a
// doubled q is part of it, and with escapes so is a backslash's next byte.
func skipQuoted(s string, i int, q byte, escapes bool) int {
	for i++; i < len(s); i++ {
		switch {
		case escapes && s[i] == '\\':
			i++
		case s[i] == q && i+1 < len(s) && s[i+1] == q:
			i++
		case s[i] == q:
			return i + 1
		}
	}
	return i
}

// identChar reports whether b can continue an SQL identifier (or a dollar quote's tag).
func identChar(b byte) bool {
	return b == '_' || b == '$' || b >= '0' && b <= '9' || b >= 'a' && b <= 'z' || b >= 'A' && b <= 'Z' || b >= 0x80
}
