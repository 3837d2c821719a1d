// contrib/gocron's Locker as a program of a user's module: every replica runs the same
// scheduler; each occurrence runs on one of them.
package main

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/pgadvisory/advisory"
	advgocron "github.com/pgadvisory/advisory/contrib/gocron"
)

func main() {
	m, err := advisory.New(context.Background(), os.Getenv("DATABASE_URL"))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	locker, err := advgocron.NewLocker(m, 500*time.Millisecond)
	if err != nil {
		log.Fatal(err)
	}
	s, err := gocron.NewScheduler(gocron.WithDistributedLocker(locker))
	if err != nil {
		log.Fatal(err)
	}
	ran := make(chan struct{}, 1)
	_, err = s.NewJob(gocron.DurationJob(time.Second), gocron.NewTask(func() {
		select { // writeReport() in a real program
		case ran <- struct{}{}:
		default:
		}
	}), gocron.WithName("report"), gocron.WithStartAt(gocron.WithStartImmediately()))
	if err != nil {
		log.Fatal(err)
	}
	s.Start()
	<-ran
	if err := s.Shutdown(); err != nil {
		log.Fatal(err)
	}
	// Before the Manager closes (deferred): keeps the hold of the run just made, so a
	// replica whose timer fires a little late does not run it again.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := locker.Close(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("report written")
}
