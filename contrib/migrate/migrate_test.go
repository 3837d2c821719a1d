package advmigrate_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	advmigrate "github.com/pgadvisory/advisory/contrib/migrate"
)

// TestFiveInstancesMigrateOnce: five golang-migrate instances, each with a Manager and a
// pgx/v5 driver of its own, run Up on one database at once; every migration runs once.
func TestFiveInstancesMigrateOnce(t *testing.T) {
	t.Parallel()
	dsn := freshDB(t, 300*time.Millisecond)
	upConcurrently(t, dsn, 5)
	conn := connect(t, dsn)
	applied, version, dirty := state(t, conn)
	assert.Equal(t, []int{1, 2, 3}, applied, "each migration once, in order")
	assert.Equal(t, 3, version)
	assert.False(t, dirty)
	var open, tagged int
	require.NoError(t, conn.QueryRow(ctxT(t), `SELECT count(*), count(*) FILTER (WHERE application_name LIKE 'pgadv/%')
		FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()`).Scan(&open, &tagged))
	assert.GreaterOrEqual(t, open, 5, "the drivers' sessions are still open")
	assert.Zero(t, tagged, "Unlock gave every driver's session its own application_name back")
}

// upConcurrently runs Up in n instances at once, each with a Manager and a pgx/v5 driver
// of its own; one applies the migrations, the others find nothing to do.
func upConcurrently(t *testing.T, dsn string, n int, opts ...advmigrate.Option) {
	t.Helper()
	migs := make([]*migrate.Migrate, n)
	for i := range migs {
		migs[i], _ = newMigrate(t, dsn, newManager(t, dsn), t.Name(), opts...)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	start := make(chan struct{})
	for i, mg := range migs {
		wg.Go(func() {
			<-start
			errs[i] = mg.Up()
		})
	}
	close(start)
	wg.Wait()
	ran := 0
	for i, err := range errs {
		if err == nil {
			ran++
			continue
		}
		assert.ErrorIs(t, err, migrate.ErrNoChange, "instance %d", i)
	}
	assert.Equal(t, 1, ran, "instances that applied migrations")
}

// upRecovering is the recovery recipe of docs/migrations.md: Up; if an earlier holder
// was killed in the middle of a migration, the version is dirty and the wrapper's drain
// has ended that migration's session (rolled back): force the version before it and run
// Up again. Only for migrations that run in one transaction.
// It reports whether the version was dirty.
func upRecovering(t testing.TB, mg *migrate.Migrate) (bool, error) {
	t.Helper()
	err := mg.Up()
	var dirty migrate.ErrDirty
	if !errors.As(err, &dirty) {
		return false, err
	}
	require.Equal(t, 2, dirty.Version, "the killed holder's migration")
	require.NoError(t, mg.Force(1))
	return true, mg.Up()
}
