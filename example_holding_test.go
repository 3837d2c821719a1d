package advisory_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
)

// Behind a transaction pooler (PgBouncer pool_mode=transaction, Supabase's port 6543,
// Neon's -pooler endpoints, RDS Proxy) New finds the pooler and holds each lock as one
// open transaction; WithHolding(HoldingTransaction) does so on any connection, as here.
// The lock is held until Unlock commits the transaction: a fenced write made with
// BeginFunc commits then, with the lock, and never if the lock is lost first.
func ExampleWithHolding() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"), advisory.WithHolding(advisory.HoldingTransaction))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	fmt.Println("holding by", m.Holding())

	l, err := m.Lock(ctx, "example/report")
	if err != nil {
		log.Fatal(err)
	}
	err = l.BeginFunc(ctx, func(tx pgx.Tx) error {
		// A write that must come from the holder only: it waits in the lock's
		// transaction and commits with it.
		_, err := tx.Exec(ctx, "SELECT 1")
		return err
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err) // the lock was lost, or its writes did not commit
	}
	fmt.Println("written and released")
	// Output:
	// holding by transaction
	// written and released
}
