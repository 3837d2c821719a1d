// contrib/robfigcron's Example as a program of a user's module.
package main

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

func main() {
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
}
