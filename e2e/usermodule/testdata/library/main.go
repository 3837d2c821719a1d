// The README's quick start as a program of a user's module.
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/pgadvisory/advisory"
)

func main() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	// Every replica runs this at start-up. One migrates; the others wait in Do,
	// then run migrate themselves and find nothing left to do.
	err = m.Do(ctx, "migrations", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost: stop work that needs exclusivity.
		return migrate(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
}

func migrate(context.Context) error {
	fmt.Println("migrated")
	return nil
}
