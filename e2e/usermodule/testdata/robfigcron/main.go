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

	// Cancelled at shutdown: it ends a running job's ctx and the lock's hold.
	ctx, shutdown := context.WithCancel(context.Background())
	defer shutdown()
	logger := cron.PrintfLogger(log.New(os.Stderr, "cron: ", log.LstdFlags))
	c := cron.New(cron.WithSeconds(), cron.WithLogger(logger), cron.WithChain(
		cron.Recover(logger),
		advrobfigcron.OnOneReplica(m, "hourly-report", 30*time.Second,
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
	shutdown()        // ends the hold: the lock is released now, not in 30 s
	<-c.Stop().Done() // waits for the running job to return
	fmt.Println("report written")
}
