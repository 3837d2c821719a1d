package main_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestStatusNamesATransactionHoldingAtOnce (issue 46, item 6): behind PgBouncer in
// transaction mode, status shows an uncontended run's lock under its name as soon as
// CMD runs, not "-" until run's first heartbeat: every statement run makes on the
// holding after the lock statement names the lock (pg_stat_activity shows the last).
func TestStatusNamesATransactionHoldingAtOnce(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(4))
	env := []string{"DATABASE_URL=" + b.DSN()}
	name := t.Name()
	ready, proceed := filepath.Join(t.TempDir(), "ready"), filepath.Join(t.TempDir(), "go")
	p := startEnv(t, env, "run", "--heartbeat", "10s", "--name", name, "--holder-name", name+"/holder", "--",
		"sh", "-c", `touch "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`, "sh", ready, proceed)
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 20*time.Second, 5*time.Millisecond,
		"CMD never ran; run's stderr:\n%s", p.stderr)

	st := wait(t, startEnv(t, env, "status", "--json", "--name", name))
	require.Equal(t, 0, st.code, st.stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(st.stdout), &rows), st.stdout)
	require.Len(t, rows, 1, st.stdout)
	if rows[0]["name"] != name {
		var q string
		if c, err := pgx.Connect(context.Background(), dsn(t)); err == nil {
			_ = c.QueryRow(context.Background(), "SELECT query FROM pg_stat_activity WHERE pid = $1",
				int64(rows[0]["pid"].(float64))).Scan(&q)
			c.Close(context.Background())
		}
		t.Fatalf("status shows the holding as %v, want %q; the holding's last statement: %q", rows[0]["name"], name, q)
	}
	require.NoError(t, os.WriteFile(proceed, nil, 0o644))
	r := wait(t, p)
	require.Equal(t, 0, r.code, r.stderr)
}
