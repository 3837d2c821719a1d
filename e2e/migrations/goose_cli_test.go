package migrations_test

import (
	"context"
	"fmt"
	"os/exec"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestGooseCLIUnderRun: four `pgadvisory run -- goose up` at once, the holder SIGKILLed in
// the middle of migration 3, three rounds. goose has no dirty flag: it runs each
// migration in a transaction that also records the version, and sends the statements one
// by one, so the dead holder's migration never commits (its backend fails when it next
// writes to the closed socket). Without the drain its transaction still holds the table
// lock of its ALTER TABLE while the next holder's goose starts, which then waits for it.
func TestGooseCLIUnderRun(t *testing.T) {
	runRounds(t, scenario{
		name: "goose_cli",
		command: func(tl *tools, w int, url string) *exec.Cmd {
			return exec.Command(tl.pgadvisory, "run", "--name", roundLock, "--wait", "2m", "--holder-name", fmt.Sprintf("lock.w%d", w),
				"--", "goose", "-dir", "testdata/goose", "postgres", url, "up")
		},
		version: gooseVersion,
	})
}

// gooseVersion reads goose's goose_db_version; goose has no dirty flag.
func gooseVersion(ctx context.Context, conn *pgx.Conn) (version int64, dirty bool, err error) {
	err = conn.QueryRow(ctx, "SELECT max(version_id) FROM goose_db_version WHERE is_applied").Scan(&version)
	return version, false, err
}
