// contrib/goose's Example as a program of a user's module.
package main

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

// migrations stand for the application's (usually an embed.FS).
var migrations = fstest.MapFS{"00001_widgets.sql": {Data: []byte(`-- +goose Up
CREATE TABLE widgets (id int);
-- +goose Down
DROP TABLE widgets;
`)}}

func main() {
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
	p, err := goose.NewProvider(goose.DialectPostgres, db, migrations, goose.WithSessionLocker(lk))
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
}
