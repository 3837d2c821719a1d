package advrobfigcron_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/pgadvisory/advisory"
	advrobfigcron "github.com/pgadvisory/advisory/contrib/robfigcron"
)

// Every replica runs the same Cron: at each tick one replica runs the report, the others
// skip. The lock is kept for at least 500 ms (less than the second between ticks) so that
// a replica whose timer fires late still skips; cron.Recover, first in the chain, keeps a
// panicking job from ending the process. At shutdown the Cron stops first, then ctx ends.
func Example() {
	m, err := advisory.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	// Ends a running FuncJob's ctx and the lock's hold at once: cancelled at shutdown,
	// after the Cron's Stop (or when the stop takes too long).
	ctx, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	logger := cron.PrintfLogger(log.New(os.Stderr, "cron: ", log.LstdFlags))
	c := cron.New(cron.WithSeconds(), cron.WithLogger(logger), cron.WithChain(
		cron.Recover(logger),
		advrobfigcron.OnOneReplica(m, "report", 500*time.Millisecond,
			advrobfigcron.WithLogger(logger), advrobfigcron.WithContext(ctx)),
	))
	ran := make(chan struct{}, 1)
	// A FuncJob's ctx is cancelled if the lock is lost; its error is logged.
	_, err = c.AddJob("* * * * * *", advrobfigcron.FuncJob(func(ctx context.Context) error {
		select { // writeReport(ctx) in a real program
		case ran <- struct{}{}:
		default:
		}
		return nil
	}))
	if err != nil {
		log.Fatal(err)
	}
	c.Start()
	<-ran
	// Stop waits for the running job and then its hold, so that a replica whose timer
	// fires late still skips the tick this one ran; cancelling ctx first would end both
	// at once. A budget for the wait: past it, ctx ends them.
	stopped := c.Stop()
	select {
	case <-stopped.Done():
	case <-time.After(10 * time.Second):
		shutdown()
		<-stopped.Done()
	}
	shutdown()
	fmt.Println("report written")
	// Output: report written
}

// One lock per job: wrap each job with its own chain instead of the Cron's. Here the
// wrapped job is run by hand, as the Cron would at a tick; no other replica holds the
// lock, so it runs.
func ExampleOnOneReplica() {
	m, err := advisory.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	export := cron.NewChain(advrobfigcron.OnOneReplica(m, "nightly-export", 0)).
		Then(cron.FuncJob(func() { fmt.Println("exported") }))
	export.Run() // c.AddJob("0 3 * * *", export) in a real program
	// Output: exported
}
