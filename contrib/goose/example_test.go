package advgoose_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"os"
	"testing/fstest"

	"github.com/pressly/goose/v3"

	"github.com/pgadvisory/advisory"
	advgoose "github.com/pgadvisory/advisory/contrib/goose"
)

// exampleMigrations stand for the application's (usually an embed.FS).
var exampleMigrations = fstest.MapFS{"00001_widgets.sql": {Data: []byte(`-- +goose Up
CREATE TABLE advgoose_example_widgets (id int);
-- +goose Down
DROP TABLE advgoose_example_widgets;
`)}}

// Every replica runs this at start-up: one migrates, the others wait for the lock and
// then find nothing left to do. A loss of the lock stops the migration in flight. The
// same DSN works directly and through a transaction pooler (PgBouncer
// pool_mode=transaction): OpenDB opens goose's *sql.DB fit for either.
func Example() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL")
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	db, err := advgoose.OpenDB(m, dsn) // sql.Open("pgx", dsn), in pgx's exec mode behind a transaction pooler
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	lk := advgoose.New(m, "myapp/migrations")
	p, err := goose.NewProvider(goose.DialectPostgres, db, exampleMigrations, goose.WithSessionLocker(lk))
	if err != nil {
		log.Fatal(err)
	}
	ctx, cancel := lk.Context(ctx) // cancelled if the lock is lost
	defer cancel()
	_, err = p.Up(ctx)
	if errors.Is(err, advisory.ErrLockLost) {
		log.Fatal("lost the migration lock; the migration in flight was stopped: ", err)
	}
	if err != nil {
		log.Fatal(err)
	}
	v, err := p.GetDBVersion(ctx)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("schema at version", v)
	// Output: schema at version 1
}

// The same with goose.WithLocker, when the Provider's session need not be tagged (see
// the package doc for what that gives up).
func ExampleNew() {
	ctx := context.Background()
	dsn := os.Getenv("DATABASE_URL")
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	db, err := advgoose.OpenDB(m, dsn) // sql.Open("pgx", dsn), in pgx's exec mode behind a transaction pooler
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	p, err := goose.NewProvider(goose.DialectPostgres, db, exampleMigrations,
		goose.WithLocker(advgoose.New(m, "myapp/migrations")))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := p.Up(ctx); err != nil {
		log.Fatal(err)
	}
	fmt.Println("migrated")
	// Output: migrated
}
