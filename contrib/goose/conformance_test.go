package advgoose_test

import (
	"testing"
	"time"

	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	"github.com/pressly/goose/v3/lock/locktesting"
	"github.com/stretchr/testify/require"

	advgoose "github.com/pgadvisory/advisory/contrib/goose"
)

// goose's own conformance kit for third-party lockers (lock/locktesting, as published in
// goose v3.30.0): five Providers, each with its own Manager, *sql.DB and Locker, run Up
// at once; exactly one applies every migration, the others none, and all end at the
// latest version. Then the database is checked too: each migration recorded and run once.
func TestLocktestingProviderLocking(t *testing.T) {
	for _, mode := range modes {
		t.Run(mode.name, func(t *testing.T) {
			dsn, admin := database(t)
			locktesting.TestProviderLocking(t, func(t *testing.T) *goose.Provider {
				lk := advgoose.New(newManager(t, dsn), "migrations")
				return newProvider(t, dsn, lk, mode.session)
			})
			require.Len(t, appliedOnce(t, admin), 3)
		})
	}
}

// goose's kit for the Locker interface alone: five Lockers race for the lock with a 2 s
// timeout each; exactly one gets it (and unlocks, 4 s later, with its expired ctx).
func TestLocktestingConcurrentLocking(t *testing.T) {
	dsn, _ := database(t)
	m := newManager(t, dsn)
	locktesting.TestConcurrentLocking(t, openDB(t, dsn), func(t *testing.T) lock.Locker {
		return advgoose.New(m, "migrations")
	}, 2*time.Second)
}
