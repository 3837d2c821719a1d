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
	if _, err := FindBinaries(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true and no PostgreSQL binaries: %v", err)
		}
		t.Skip("no PostgreSQL binaries:", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
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
