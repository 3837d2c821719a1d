// contrib/migrate's Example (the README's snippet) as a program of a user's module, run
// from the module's directory, which has migrations/.
package main

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

func main() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL")
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()

	src, err := (&file.File{}).Open("file://migrations") // read by WithRecoverDirty only
	if err != nil {
		log.Fatal(err)
	}
	defer src.Close()
	locked, err := advmigrate.Open(ctx, m, dsn, "myapp/migrations", &pgx.Config{},
		advmigrate.WithWait(5*time.Minute), advmigrate.WithRecoverDirty(src))
	if err != nil {
		log.Fatal(err)
	}
	mg, err := migrate.NewWithDatabaseInstance("file://migrations", "pgx5", locked)
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
}
