package advisory_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
)

// Every replica runs this at start-up. One migrates; the others wait in Do, then run
// migrate themselves and find nothing left to do.
func Example() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	err = m.Do(ctx, "migrations", func(ctx context.Context) error {
		// ctx is cancelled if the lock is lost: stop work that needs exclusivity.
		return migrate(ctx)
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: migrated
}

func migrate(ctx context.Context) error {
	fmt.Println("migrated")
	return ctx.Err()
}

// A singleton job: whoever gets the lock runs it; the rest skip this round.
func ExampleManager_TryLock() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	l, err := m.TryLock(ctx, "nightly-report")
	switch {
	case errors.Is(err, advisory.ErrLocked):
		fmt.Println("another replica is running the report")
		return
	case err != nil:
		log.Fatal(err)
	}
	defer l.Unlock(ctx)

	// A second try, from anywhere, finds it held.
	_, err = m.TryLock(ctx, "nightly-report")
	fmt.Println(errors.Is(err, advisory.ErrLocked))
	// Output: true
}

// Do is the simplest correct use: the function's ctx ends if the lock is lost.
func ExampleManager_Do() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	err = m.Do(ctx, "tenant/42/billing", func(ctx context.Context) error {
		fmt.Println("billing tenant 42")
		return nil
	})
	fmt.Println(err)
	// Output:
	// billing tenant 42
	// <nil>
}

// TryDo runs a scheduled job on one replica: every replica's timer fires it, the first
// runs it and holds the lock for at least a second, and the others, firing a little later,
// skip at once.
func ExampleManager_TryDo() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	const atLeast = time.Second // more than the skew between the replicas' timers
	occurrence := "hourly-report@" + time.Now().UTC().Truncate(time.Hour).Format(time.RFC3339)
	results := make(chan bool)
	for range 3 { // three replicas, here goroutines
		go func() {
			ran, err := m.TryDo(ctx, occurrence, atLeast, func(ctx context.Context) error {
				return nil // write the report
			})
			if err != nil {
				log.Print(err)
			}
			results <- ran
		}()
	}
	runs := 0
	for range 3 {
		if <-results {
			runs++
		}
	}
	fmt.Println("runs:", runs)
	// Output: runs: 1
}

// A long-running holder watches Done, so it stops as soon as the lock is lost.
func ExampleLock_Done() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	l, err := m.Lock(ctx, "leader")
	if err != nil {
		log.Fatal(err)
	}
	ticker := time.NewTicker(10 * time.Millisecond)
	defer ticker.Stop()
	for i := 0; i < 3; i++ {
		select {
		case <-l.Done():
			fmt.Println("lost the lock:", l.Err())
			return
		case <-ticker.C:
			// one unit of leader-only work
		}
	}
	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Err())
	// Output: advisory: lock not held
}

// At most 2 workers, across every process, run a heavy job at a time; the rest wait
// their turn in Acquire.
func ExampleSemaphore() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	sem, err := m.Semaphore("example-heavy-jobs", 2)
	if err != nil {
		log.Fatal(err)
	}
	l, err := sem.Acquire(ctx) // blocks while 2 holders have the slots
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("holding", l.Name()[:len("example-heavy-jobs#slot/")]+"N")
	// ... the job; stop if <-l.Done() closes: the slot was lost.
	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}

	// TryAcquire does not wait.
	a, _ := sem.TryAcquire(ctx)
	b, _ := sem.TryAcquire(ctx)
	_, err = sem.TryAcquire(ctx)
	fmt.Println(errors.Is(err, advisory.ErrLocked))
	a.Unlock(ctx)
	b.Unlock(ctx)
	// Output:
	// holding example-heavy-jobs#slot/N
	// true
}

// The migration tool's own connections carry the holding's tag, so that if this process
// dies mid-migration, the next holder's Do terminates them (and rolls their transaction
// back) before its own migration starts.
func ExampleLockFromContext() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	err = m.Do(ctx, "migrations", func(ctx context.Context) error {
		l := advisory.LockFromContext(ctx)
		dsn, err := l.WorkConnString(os.Getenv("DATABASE_URL"))
		if err != nil {
			return err
		}
		// Hand dsn to the migration tool (golang-migrate, goose, database/sql, pgx).
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		var app string
		if err := conn.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&app); err != nil {
			return err
		}
		fmt.Println(strings.HasPrefix(app, "pgadv/"))
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	// Output: true
}

// A leader publishes its address; a follower learns who leads, and of each change,
// without polling.
func ExampleManager_Observe() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"), advisory.WithLeaderTable())
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	if err := m.CreateLeaderTable(ctx); err != nil {
		log.Fatal(err)
	}

	leaders, err := m.Observe(ctx, "example-scheduler") // on a follower
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("elected:", (<-leaders).Elected)

	go m.LeadAs(ctx, "example-scheduler", "10.0.0.7:8080", func(ctx context.Context) error {
		<-ctx.Done() // lead until cancelled or lost
		return nil
	})
	for ld := range leaders {
		if ld.Value != "" { // a re-check may see the lock before the value is published
			fmt.Println("leader at", ld.Value)
			break
		}
	}
	// Output:
	// elected: false
	// leader at 10.0.0.7:8080
}

// A service that locks a name per order, from many replicas, and reads the names only in
// its own logs and hooks: its statements go by key, one prepared text for every name.
// The locks are the same as a default Manager's; only sessions looking from outside no
// longer read the name from this Manager's statements.
func ExampleWithoutNamesInActivity() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"), advisory.WithoutNamesInActivity())
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	l, err := m.Lock(ctx, "order/1234")
	if err != nil {
		log.Fatal(err)
	}
	defer l.Unlock(ctx)
	fmt.Println(l.Name())

	hs, err := m.Holders(ctx, "order/1234")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%d holder, name %q\n", len(hs), hs[0].Name)
	// Output:
	// order/1234
	// 1 holder, name ""
}
