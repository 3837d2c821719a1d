package pgtest_test

import (
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

func TestWithParams(t *testing.T) {
	for _, tc := range []struct {
		dsn, want string
		params    map[string]string
	}{
		{"host=h port=5 user=u", "host=h port=5 user=u application_name=a pool_max_conns=3",
			map[string]string{"pool_max_conns": "3", "application_name": "a"}},
		{"host=h user=u ", "host=h user=u application_name='a b\\'c'", map[string]string{"application_name": "a b'c"}},
		{"host=h", "host=h options=''", map[string]string{"options": ""}},
		{"postgres://u:p@h:5/db?sslmode=disable", "postgres://u:p@h:5/db?sslmode=disable&application_name=a%20b",
			map[string]string{"application_name": "a b"}},
		{"postgresql://u@h/db?application_name=x", "postgresql://u@h/db?application_name=y",
			map[string]string{"application_name": "y"}},
		{"postgres://u@h/db", "postgres://u@h/db?pool_max_conns=3", map[string]string{"pool_max_conns": "3"}},
		{"postgres://u@h/db?options=-c%20a%3Db&x=1+2", "postgres://u@h/db?options=-c%20a%3Db&x=1+2&y=%2B",
			map[string]string{"y": "+"}},
	} {
		assert.Equal(t, tc.want, pgtest.WithParams(tc.dsn, tc.params), tc.dsn)
	}
}

// TestWithParamsParses: what WithParams makes, pgx reads back as meant, in both forms.
func TestWithParamsParses(t *testing.T) {
	for _, dsn := range []string{"host=127.0.0.1 port=5 user=u dbname=d", "postgres://u@127.0.0.1:5/d"} {
		cfg, err := pgconn.ParseConfig(pgtest.WithPairs(dsn, "application_name=it's a test", "search_path=a\\b"))
		require.NoError(t, err, dsn)
		assert.Equal(t, "it's a test", cfg.RuntimeParams["application_name"], dsn)
		assert.Equal(t, `a\b`, cfg.RuntimeParams["search_path"], dsn)
		assert.Equal(t, "u", cfg.User)
	}
}
