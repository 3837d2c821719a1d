package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
)

// A fenced write: the UPDATE commits only if the lock is still held at the commit, so a
// replica that stalled and lost its lock cannot overwrite the new holder's work.
func ExampleManager_DoTx() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	err = m.DoTx(ctx, "example-ledger", func(ctx context.Context, tx pgx.Tx) error {
		var n int
		// In a real job: UPDATE ledger SET ... WHERE ...
		return tx.QueryRow(ctx, "SELECT 1").Scan(&n)
	})
	fmt.Println("committed:", err == nil)
	// Output: committed: true
}

// A fencing token for writes elsewhere: the holder hands it to the writer, which checks
// it in its own transaction; a holder's token is refused once a newer holder took one.
func ExampleLock_Token() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"), advisory.WithFenceTable("example_fence"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if err := m.CreateFenceTable(ctx); err != nil {
		log.Fatal(err)
	}

	first, _ := m.Lock(ctx, "example-export")
	old, err := first.Token(ctx)
	if err != nil {
		log.Fatal(err)
	}
	first.Unlock(ctx)

	second, _ := m.Lock(ctx, "example-export")
	newer, _ := second.Token(ctx)
	defer second.Unlock(ctx)
	fmt.Println("newer token is greater:", newer > old)

	// A writer on any connection, still carrying the old token:
	pool, err := pgx.Connect(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer pool.Close(ctx)
	tx, _ := pool.Begin(ctx)
	defer tx.Rollback(ctx)
	err = m.CheckToken(ctx, tx, "example-export", old)
	fmt.Println("stale write refused:", errors.Is(err, advisory.ErrStaleToken))
	// Output:
	// newer token is greater: true
	// stale write refused: true
}
