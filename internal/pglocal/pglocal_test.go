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
	first, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	second, err := Start(ctx, Options{Port: first.Port()})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	if second.Port() == first.Port() {
		t.Fatalf("the second cluster kept the taken port %d", first.Port())
	}
	conn, err := pgx.Connect(ctx, second.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var dir string
	if err := conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(second.dir, "data"); dir != want {
		t.Fatalf("the second cluster's DSN reaches %s, not its own %s", dir, want)
	}
}

// TestClustersFromTheCachedInitdbAreApart: a cluster made from the cached initdb (the
// second, when the first made the cache) is a copy of its own: a table made in one is not
// in the other, and each DSN reaches its own data directory.
func TestClustersFromTheCachedInitdbAreApart(t *testing.T) {
	ctx := needBinaries(t)
	first, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer first.Close()
	bin, _ := FindBinaries()
	if cached, _ := initdbCache(bin); cached != "" {
		if _, err := os.Stat(filepath.Join(cached, "PG_VERSION")); err != nil {
			t.Fatalf("no cached initdb after a cluster was made: %v", err)
		}
	}
	second, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer second.Close()
	one, err := pgx.Connect(ctx, first.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer one.Close(ctx)
	if _, err := one.Exec(ctx, "CREATE TABLE only_in_the_first (id int)"); err != nil {
		t.Fatal(err)
	}
	two, err := pgx.Connect(ctx, second.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer two.Close(ctx)
	var n int
	if err := two.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname = 'only_in_the_first'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatal("a table made in the first cluster is in the second")
	}
	for _, c := range []struct {
		conn *pgx.Conn
		cl   *Cluster
	}{{one, first}, {two, second}} {
		var dir string
		if err := c.conn.QueryRow(ctx, "SHOW data_directory").Scan(&dir); err != nil {
			t.Fatal(err)
		}
		if want := filepath.Join(c.cl.dir, "data"); dir != want {
			t.Fatalf("a DSN reaches %s, not its own %s", dir, want)
		}
	}
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
