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

// Workers of many processes contending for the same tenants: with WithWaitSessions a
// process spends at most that many connections on waits. Here one holder keeps 5 tenants;
// 5 Locks wait for them, only 2 of them on sessions of their own, and each gets its
// tenant once the holder lets it go.
func ExampleWithWaitSessions() {
	ctx := context.Background()
	url := os.Getenv("DATABASE_URL")
	holder, err := advisory.New(ctx, url) // another replica, say
	if err != nil {
		log.Fatal(err)
	}
	defer holder.Close()
	m, err := advisory.New(ctx, url, advisory.WithSharedSessions(100), advisory.WithWaitSessions(2))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	var held []*advisory.Lock
	for i := range 5 {
		l, err := holder.Lock(ctx, fmt.Sprintf("example/waits/tenant/%d", i))
		if err != nil {
			log.Fatal(err)
		}
		held = append(held, l)
	}
	got := make(chan *advisory.Lock, 5)
	for i := range 5 {
		go func() {
			l, err := m.Lock(ctx, fmt.Sprintf("example/waits/tenant/%d", i))
			if err != nil {
				log.Fatal(err)
			}
			got <- l
		}()
	}
	for _, l := range held {
		if err := l.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
	}
	for range 5 {
		l := <-got
		if err := l.Unlock(ctx); err != nil {
			log.Fatal(err)
		}
	}
	fmt.Println("5 tenants taken by the waiting Locks")
	// Output:
	// 5 tenants taken by the waiting Locks
}
