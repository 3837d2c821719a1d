package pgtest

import (
	"context"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5"
)

// Show runs SHOW what (SERVERS, CLIENTS, POOLS, ...) on PgBouncer's admin console and
// returns its rows, each a map from column name to text value. It blocks for one
// connection and one round trip to the console.
func (b *PgBouncer) Show(ctx context.Context, what string) ([]map[string]string, error) {
	conn, err := pgx.Connect(ctx, b.AdminDSN())
	if err != nil {
		return nil, fmt.Errorf("pgtest: pgbouncer console: %w", err)
	}
	defer conn.Close(ctx)
	rows, err := conn.Query(ctx, "SHOW "+what)
	if err != nil {
		return nil, fmt.Errorf("pgtest: pgbouncer console: SHOW %s: %w", what, err)
	}
	defer rows.Close()
	var out []map[string]string
	for rows.Next() {
		row := make(map[string]string)
		for i, f := range rows.FieldDescriptions() {
			row[f.Name] = string(rows.RawValues()[i])
		}
		out = append(out, row)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("pgtest: pgbouncer console: SHOW %s: %w", what, err)
	}
	return out, nil
}

// ServerPIDs returns the backend pids of PgBouncer's server connections (SHOW SERVERS,
// remote_pid): the backends whose locks its clients may have left behind.
func (b *PgBouncer) ServerPIDs(ctx context.Context) ([]uint32, error) {
	rows, err := b.Show(ctx, "SERVERS")
	if err != nil {
		return nil, err
	}
	pids := make([]uint32, 0, len(rows))
	for _, r := range rows {
		pid, err := strconv.ParseUint(r["remote_pid"], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("pgtest: pgbouncer console: SHOW SERVERS remote_pid %q: %w", r["remote_pid"], err)
		}
		pids = append(pids, uint32(pid))
	}
	return pids, nil
}
