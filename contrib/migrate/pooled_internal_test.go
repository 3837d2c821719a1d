package advmigrate

import (
	"testing"

	"github.com/pgadvisory/advisory/internal/sqlscan"
)

// TestStatements: the count runTagged decides by (one statement: run again untagged after
// 25001; internal/sqlscan's), on golang-migrate's own example migration and the quotings
// that hide a semicolon.
func TestStatements(t *testing.T) {
	for _, c := range []struct {
		sql  string
		want int
	}{
		{"", 0},
		{"  -- only a comment; here\n/* and ; /* nested; */ this; */ ;;", 0},
		{"CREATE UNIQUE INDEX CONCURRENTLY users_email_index ON users (email);\n\n-- Lorem ipsum; dolor.\n", 1},
		{"CREATE INDEX CONCURRENTLY i ON t (a)", 1},
		{"SELECT 'a;b', E'c\\';d', \"e;\"\"f\", $$g;h$$, $x$i;$$;j$x$; ", 1},
		{"SELECT $1; SELECT a$b; SELECT 2", 3},
		{"BEGIN; INSERT INTO t VALUES (1); COMMIT;", 3},
		{"CREATE FUNCTION f() RETURNS int LANGUAGE sql AS $body$ SELECT 1; $body$; CREATE INDEX CONCURRENTLY i ON t (a);", 2},
		{"SELECT 'it''s; fine'", 1},
	} {
		if got := len(sqlscan.Split(c.sql)); got != c.want {
			t.Errorf("statements of %q: %d, want %d", c.sql, got, c.want)
		}
	}
}
