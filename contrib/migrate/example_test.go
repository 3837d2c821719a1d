package advmigrate_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/file"

	"github.com/pgadvisory/advisory"
	advmigrate "github.com/pgadvisory/advisory/contrib/migrate"
)

// Every replica runs this at start-up: one migrates, the others wait for the lock (up to
// five minutes), then find nothing left to do. WithRecoverDirty mends, under the lock, a
// version that a replica killed in the middle of a migration left dirty (without it every
// survivor fails with "Dirty database version N" until someone runs Force: a crash loop
// in Kubernetes); use it when every migration runs in one transaction. Open builds
// golang-migrate's pgx/v5 driver so that it also works through a transaction pooler
// (PgBouncer pool_mode=transaction) with the same DSN.
func Example() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL")
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	src, err := (&file.File{}).Open("file://testdata/example") // read by WithRecoverDirty only
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	locked, err := advmigrate.Open(ctx, m, dsn, "myapp/migrations", &pgx.Config{},
		advmigrate.WithWait(5*time.Minute), advmigrate.WithRecoverDirty(src))
	if err != nil {
		log.Fatal(err)
	}
	mg, err := migrate.NewWithDatabaseInstance("file://testdata/example", "pgx5", locked)
	if err != nil {
		log.Fatal(err)
	}
	defer mg.Close()                 // closes the driver, not m
	mg.LockTimeout = 6 * time.Minute // longer than the wrapper's wait

	err = mg.Up()
	switch {
	case errors.Is(err, advisory.ErrLockLost):
		log.Fatal("the lock was lost: no further migration was started; exit, and let the next replica go on")
	case err != nil && !errors.Is(err, migrate.ErrNoChange):
		log.Fatal(err)
	}
	fmt.Println("migrated")
	// Output: migrated
}
