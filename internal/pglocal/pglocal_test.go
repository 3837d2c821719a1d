package pglocal

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestStartMovesOffATakenPort: a cluster told to use a port another cluster already
// serves does not take the stranger for itself (readiness checks the data directory): it
// moves to another port, and its DSN reaches its own data directory.
func TestStartMovesOffATakenPort(t *testing.T) {
	ctx := needBinaries(t)
	first := start(t, ctx, Options{})
	second := start(t, ctx, Options{Port: first.Port()})
	if second.Port() == first.Port() {
		t.Fatalf("the second cluster kept the taken port %d", first.Port())
	}
	requireOwnDataDir(t, ctx, connect(t, ctx, second), second)
}

// TestClustersFromTheCachedInitdbAreApart: a cluster made from the cached initdb (the
// second, when the first made the cache) is a copy of its own: a table made in one is not
// in the other, and each DSN reaches its own data directory.
func TestClustersFromTheCachedInitdbAreApart(t *testing.T) {
	ctx := needBinaries(t)
	first := start(t, ctx, Options{})
	bin, _ := FindBinaries()
	if cached, _ := initdbCache(bin); cached != "" {
		if _, err := os.Stat(filepath.Join(cached, "PG_VERSION")); err != nil {
			t.Fatalf("no cached initdb after a cluster was made: %v", err)
		}
	}
	second := start(t, ctx, Options{})
	one, two := connect(t, ctx, first), connect(t, ctx, second)
	if _, err := one.Exec(ctx, "CREATE TABLE only_in_the_first (id int)"); err != nil {
		t.Fatal(err)
	}
	var n int
	if err := two.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname = 'only_in_the_first'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("a table made in the first cluster is in the second")
	}
	requireOwnDataDir(t, ctx, one, first)
	requireOwnDataDir(t, ctx, two, second)
}

// needBinaries skips t without PostgreSQL binaries (fails it under CI=true), and returns
// a ctx of 2 minutes for its clusters' start-up.
func needBinaries(t *testing.T) context.Context {
	t.Helper()
	if _, err := FindBinaries(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no PostgreSQL binaries: %v", err)
		}
		t.Skip("no PostgreSQL binaries:", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// start starts a cluster for t, closed when t ends.
func start(t *testing.T, ctx context.Context, opts Options) *Cluster {
	t.Helper()
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// connect connects to c for t, closed when t ends.
func connect(t *testing.T, ctx context.Context, c *Cluster) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// requireOwnDataDir fails t unless conn reached c's own data directory.
func requireOwnDataDir(t *testing.T, ctx context.Context, conn *pgx.Conn, c *Cluster) {
	t.Helper()
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(c.dir, "data"); dir != want {
		t.Fatalf("a DSN of the cluster in %s reaches %s", want, dir)
	}
}
