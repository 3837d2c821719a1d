package advgoose

import (
	"database/sql"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/advisory"
)

// OpenDB opens goose's *sql.DB on dsn with pgx's database/sql driver (what
// sql.Open("pgx", dsn) opens), fit for the path m goes through: when m goes through a
// transaction pooler ([advisory.Bounds].TransactionPooler), in pgx's QueryExecModeExec
// unless dsn chooses another mode than pgx's default cache_statement, whose named
// prepared statements a transaction pooler carries to other clients' server connections
// ("prepared statement ... already exists" from goose's version-table statements). On a
// direct connection it is sql.Open("pgx", dsn). dsn may differ from m's. It does not
// connect; it returns an error only for a dsn pgx cannot parse. Close the *sql.DB when
// goose is done. It panics if m is nil.
func OpenDB(m *advisory.Manager, dsn string) (*sql.DB, error) {
	if m == nil {
		panic("advgoose: OpenDB with a nil Manager")
	}
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("advgoose: goose's connection string: %w", err)
	}
	if m.Bounds().TransactionPooler && cfg.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
		cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	}
	return stdlib.OpenDB(*cfg), nil
}
