package sqlscan_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/sqlscan"
)

func words(sts []sqlscan.Statement) [][]string {
	var out [][]string
	for _, st := range sts {
		out = append(out, st.Words(3))
	}
	return out
}

func TestSplit(t *testing.T) {
	for _, tc := range []struct {
		sql  string
		want [][]string
	}{
		{"", nil},
		{" ;; -- only a comment\n /* and /* nested */ one */ ;", nil},
		{"COMMIT", [][]string{{"commit"}}},
		{"insert into t values (1); Commit ;", [][]string{{"insert", "into", "t"}, {"commit"}}},
		{"select ';commit;' ; select 1", [][]string{{"select"}, {"select"}}},
		{"select 'it''s; commit'; end", [][]string{{"select"}, {"end"}}},
		{`select E'\'; commit'; rollback`, [][]string{{"select"}, {"rollback"}}},
		{`select "a;""b"; begin`, [][]string{{"select"}, {"begin"}}},
		{"select $$ ; commit; $$; abort", [][]string{{"select"}, {"abort"}}},
		{"select $f$ $$ ; commit; $$ $f$; start transaction", [][]string{{"select"}, {"start", "transaction"}}},
		{"select $1; commit", [][]string{{"select"}, {"commit"}}},
		{"/* c; */ commit -- ; begin\n", [][]string{{"commit"}}},
		{"/* a /* b */ ; */ end", [][]string{{"end"}}},
		{"select U&'d\\0061t; a'; reset all", [][]string{{"select"}, {"reset", "all"}}},
		{"select 'unterminated; commit", [][]string{{"select"}}},
		{"select $tag$ unterminated; commit", [][]string{{"select"}}},
		{"SET LOCAL lock_timeout = 0", [][]string{{"set", "local", "lock_timeout"}}},
	} {
		assert.Equal(t, tc.want, words(sqlscan.Split(tc.sql)), "%q", tc.sql)
	}
}

func TestCalls(t *testing.T) {
	sts := sqlscan.Split("select pg_catalog.set_config('a', f(1, 2), true), \"pg_advisory_unlock_all\"()")
	require.Len(t, sts, 1)
	calls := sts[0].Calls()
	require.Len(t, calls, 3)
	assert.Equal(t, "set_config", calls[0].Name)
	require.Len(t, calls[0].Args, 3)
	assert.Equal(t, []sqlscan.Token{{Kind: sqlscan.Word, Text: "true"}}, []sqlscan.Token(calls[0].Args[2]))
	assert.Equal(t, "f", calls[1].Name)
	assert.Len(t, calls[1].Args, 2)
	assert.Equal(t, "pg_advisory_unlock_all", calls[2].Name)
}

// FuzzSplit: any text splits without panicking; each statement's tokens come back the
// same when the statement is scanned alone; a semicolon inside quotes never splits.
func FuzzSplit(f *testing.F) {
	for _, s := range []string{"select 1; commit", "select 'a;b'", `select E'\\';'`, "select $a$;$a$",
		"/* /* */ ; */", "--;\nend", `"x;y"`, "select $1, $$", "U&'x'", "set_config('a','b',false)"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, sql string) {
		sts := sqlscan.Split(sql)
		for _, st := range sts {
			if len(st) == 0 {
				t.Fatalf("an empty statement from %q", sql)
			}
			st.Words(4)
			st.Calls()
		}
		quoted := "select '" + strings.ReplaceAll(sql, "'", "''") + "'"
		if n := len(sqlscan.Split(quoted)); n != 1 {
			t.Fatalf("a literal split into %d statements: %q", n, quoted)
		}
	})
}
