package advisory_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"sync"

	"github.com/pgadvisory/advisory"
)

// Many goroutines, each with locks of its own (a lock per tenant, per job): with
// WithSharedSessions their holdings share server sessions, so the process needs about as
// many connections as it has statements in flight, not one per held lock. Each Lock keeps
// its own Done, Err and Unlock.
func ExampleWithSharedSessions() {
	ctx := context.Background()
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"), advisory.WithSharedSessions(100))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	locks := make([]*advisory.Lock, 20)
	var wg sync.WaitGroup
	for i := range locks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := m.Lock(ctx, fmt.Sprintf("example/tenant/%d", i))
			if err != nil {
				log.Fatal(err)
			}
			locks[i] = l
		}()
	}
	wg.Wait()
	sessions := map[uint32]bool{}
	for _, l := range locks {
		sessions[l.PID()] = true
	}
	fmt.Println("20 locks held, on fewer sessions:", len(sessions) < 20, "; shared:", locks[0].SharesSession())

	if err := locks[0].Unlock(ctx); err != nil { // releases tenant 0 alone
		log.Fatal(err)
	}
	fmt.Println("the others still held:", locks[1].Err() == nil)
	for _, l := range locks[1:] {
		if err := l.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
	}
	// Output:
	// 20 locks held, on fewer sessions: true ; shared: true
	// the others still held: true
}
