// contrib/otel as a program of a user's module: the Manager's hooks record to an
// OpenTelemetry MeterProvider (a no-op one here; the application's in a real program).
package main

import (
	"context"
	"fmt"
	"log"
	"os"

	"go.opentelemetry.io/otel/metric/noop"

	"github.com/pgadvisory/advisory"
	advotel "github.com/pgadvisory/advisory/contrib/otel"
)

func main() {
	ctx := context.Background()
	hooks, err := advotel.Hooks(noop.NewMeterProvider())
	if err != nil {
		log.Fatal(err)
	}
	m, err := advisory.New(ctx, os.Getenv("DATABASE_URL"), advisory.WithHooks(hooks))
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	l, err := m.Lock(ctx, "nightly-report")
	if err != nil {
		log.Fatal(err)
	}
	if err := l.Unlock(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("locked and unlocked, measured")
}
