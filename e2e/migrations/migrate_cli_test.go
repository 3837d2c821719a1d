package migrations_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestMigrateCLIUnderRun: four `pgadvisory run -- migrate-up.sh` at once (golang-migrate's
// CLI through the recovery recipe in testdata/migrate-up.sh), the holder SIGKILLed in the
// middle of migration 3, three rounds. The interrupted migration leaves golang-migrate's
// dirty flag; the next holder's recipe forces the version before it and runs it again,
// which is only safe because run drained the dead holder's session first.
func TestMigrateCLIUnderRun(t *testing.T) {
	runRounds(t, scenario{
		name: "migrate_cli",
		command: func(tl *tools, w int, url string) *exec.Cmd {
			return exec.Command(tl.pgadvisory, "run", "--name", roundLock, "--wait", "2m", "--holder-name", fmt.Sprintf("lock.w%d", w),
				"--", "sh", "testdata/migrate-up.sh", "testdata/migrate")
		},
		version: migrateVersion,
	})
}

// migrateVersion reads golang-migrate's schema_migrations.
func migrateVersion(ctx context.Context, conn *pgx.Conn) (version int64, dirty bool, err error) {
	err = conn.QueryRow(ctx, "SELECT version, dirty FROM schema_migrations").Scan(&version, &dirty)
	return version, dirty, err
}
