package advisory_test

import (
	"context"
	"fmt"
	"log"
	"os"

	"github.com/pgadvisory/advisory"
)

// A helper that takes a lock itself can be called by code that already holds it: given
// the ctx of Do's function, its Do re-enters that holding at once instead of waiting for
// it (which would wait forever), and its end releases nothing.
func ExampleManager_Do_nested() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	err = m.Do(ctx, "accounts", func(ctx context.Context) error {
		fmt.Println("closing the month")
		if err := settle(ctx, m); err != nil { // takes "accounts" too
			return err
		}
		fmt.Println("still held:", advisory.LockFromContext(ctx).Err() == nil)
		return nil
	})
	fmt.Println("done:", err)
	// Output:
	// closing the month
	// settling, re-entered: true
	// still held: true
	// done: <nil>
}

// settle is called on its own too, where it takes the lock.
func settle(ctx context.Context, m *advisory.Manager) error {
	return m.Do(ctx, "accounts", func(ctx context.Context) error {
		fmt.Println("settling, re-entered:", advisory.LockFromContext(ctx).Reentered())
		return nil
	})
}
