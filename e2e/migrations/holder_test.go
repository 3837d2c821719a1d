package migrations_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	migratepgx "github.com/golang-migrate/migrate/v4/database/pgx/v5"
	"github.com/golang-migrate/migrate/v4/source/file"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/stdlib"

	"github.com/pgadvisory/advisory"
)

// The Go API test re-executes the test binary as its holders: with envHolder set, TestMain
// runs holderMain instead of the tests. envHolderBin names another holder program to run
// instead (an older build, to measure what the fix changed; see README.md); it gets the
// same environment.
const (
	envHolder    = "E2E_HOLDER"     // the worker's number
	envHolderBin = "E2E_HOLDER_BIN" // optional
)

// TestMigrateLibraryUnderDo: four holder processes at once, each running golang-migrate
// as a library inside Manager.Do, the holder SIGKILLed in the middle of migration 3,
// three rounds. Do drains the dead holder's migration session before calling fn, so
// fn's recovery (migrateDirty) may force the version and run migration 3 again.
func TestMigrateLibraryUnderDo(t *testing.T) {
	runRounds(t, scenario{
		name: "migrate_lib",
		command: func(tl *tools, w int, url string) *exec.Cmd {
			bin := os.Getenv(envHolderBin)
			if bin == "" {
				bin = os.Args[0]
			}
			cmd := exec.Command(bin)
			cmd.Env = []string{fmt.Sprintf("%s=%d", envHolder, w)} // the round adds the rest
			return cmd
		},
		version: migrateVersion,
	})
}

// holderMain is one holder: under the lock roundLock on $DATABASE_URL, it migrates that
// database with the migrations in testdata/migrate. It returns the exit code.
func holderMain() int {
	w := os.Getenv(envHolder)
	url := os.Getenv("DATABASE_URL")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})) // says what the drain did
	m, err := advisory.New(ctx, url+"&application_name=lock.w"+w, advisory.WithLogger(logger))
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	defer m.Close()
	err = m.Do(ctx, roundLock, func(ctx context.Context) error {
		return migrateUp(ctx, url+"&application_name=e2e.w"+w, "testdata/migrate")
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "holder:", err)
		return 1
	}
	return 0
}

// migrateUp runs golang-migrate's Up for the migrations in dir on the database at url,
// on connections tagged as the work of the holding fn's ctx carries (Lock.WorkConfig),
// after recovering from a migration an earlier holder left dirty.
func migrateUp(ctx context.Context, url, dir string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return err
	}
	advisory.LockFromContext(ctx).WorkConfig(&cfg.Config)
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	driver, err := migratepgx.WithInstance(db, &migratepgx.Config{})
	if err != nil {
		return err
	}
	mg, err := migrate.NewWithDatabaseInstance("file://"+dir, "pgx5", driver)
	if err != nil {
		return err
	}
	defer mg.Close()
	go func() { // a lost lock stops the migration after the current one
		<-ctx.Done()
		mg.GracefulStop <- true
	}()
	if err := migrateDirty(mg, dir); err != nil {
		return err
	}
	if err := mg.Up(); err != nil && !errors.Is(err, migrate.ErrNoChange) {
		return err
	}
	return ctx.Err()
}

// migrateDirty is the recovery recipe of testdata/migrate-up.sh in Go: a dirty version
// means that migration was interrupted; Do has drained the session that ran it, so its
// transaction is over; force the version before it, and Up runs it again.
func migrateDirty(mg *migrate.Migrate, dir string) error {
	v, dirty, err := mg.Version()
	if errors.Is(err, migrate.ErrNilVersion) || err == nil && !dirty {
		return nil
	}
	if err != nil {
		return err
	}
	src, err := (&file.File{}).Open("file://" + dir)
	if err != nil {
		return err
	}
	defer src.Close()
	prev := -1 // golang-migrate's "no version"
	if p, err := src.Prev(v); err == nil {
		prev = int(p)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	fmt.Fprintf(os.Stderr, "holder: migration %d was interrupted (dirty): forcing version %d and running it again\n", v, prev)
	return mg.Force(prev)
}
