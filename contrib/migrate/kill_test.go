package advmigrate_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/golang-migrate/migrate/v4/source/file"
	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	advmigrate "github.com/pgadvisory/advisory/contrib/migrate"
)

// The SIGKILL test re-executes the test binary as the holder: with envHelper set, TestMain
// runs helperMain instead of the tests.
const (
	envHelper = "ADVMIGRATE_HELPER" // the database URL
	envLock   = "ADVMIGRATE_LOCK"
)

// helperMain runs the wrapped migrate's Up on the database at $ADVMIGRATE_HELPER, under
// the lock $ADVMIGRATE_LOCK, and returns the exit code.
func helperMain() int {
	dsn := os.Getenv(envHelper)
	m, err := advisory.New(context.Background(), dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer m.Close()
	mg, _, err := openMigrate(dsn, m, os.Getenv(envLock))
	if err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	defer mg.Close()
	if err := mg.Up(); err != nil {
		fmt.Fprintln(os.Stderr, "helper:", err)
		return 1
	}
	return 0
}

// TestSIGKILLedHolder: a holder process is SIGKILLed while migration 2 sleeps (60 s) on
// the server. Its migration session was tagged by the wrapper, so the next holder's Lock
// drains it (the dead transaction is rolled back) before migrate reads the version, which
// is 2, dirty. Then either four instances with WithRecoverDirty run Up at once (the one
// that gets the lock mends the version under it), or one instance runs the recipe by
// hand (Up fails with ErrDirty; Force(1); Up). Every migration is applied once and the
// database ends clean, long before the dead sleep would have ended.
func TestSIGKILLedHolder(t *testing.T) {
	t.Parallel()
	for _, recoverDirty := range []bool{true, false} {
		t.Run(fmt.Sprintf("WithRecoverDirty=%v", recoverDirty), func(t *testing.T) {
			t.Parallel()
			dsn := freshDB(t, time.Minute)
			conn := connect(t, dsn)
			pid, app := killHolder(t, conn, dsn)
			start := time.Now()
			if recoverDirty {
				src, err := (&file.File{}).Open("file://testdata/migrations")
				require.NoError(t, err)
				t.Cleanup(func() { src.Close() })
				upConcurrently(t, dsn, 4, advmigrate.WithRecoverDirty(src)) // a source may be shared: only read
			} else {
				mg, _ := newMigrate(t, dsn, newManager(t, dsn), t.Name())
				recovered, err := upRecovering(t, mg)
				require.NoError(t, err)
				assert.True(t, recovered, "the killed migration left version 2 dirty")
			}
			took := time.Since(start)
			assert.Less(t, took, 20*time.Second, "the dead migration's 60 s sleep did not hold the next one up")
			var gone bool
			require.NoError(t, conn.QueryRow(ctxT(t), "SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $1)", pid).Scan(&gone))
			assert.True(t, gone, "the dead holder's migration session (pid %d) is gone", pid)
			applied, version, dirty := state(t, conn)
			assert.Equal(t, []int{1, 2, 3}, applied, "each migration once: the killed migration 2 was rolled back")
			assert.Equal(t, 3, version)
			assert.False(t, dirty)
			t.Logf("migrated in %v after the kill (dead session pid %d, %q)", took.Round(time.Millisecond), pid, app)
		})
	}
}

// killHolder runs a holder process until it sleeps in migration 2, SIGKILLs it, and
// returns its migration session's pid and application_name. Migration 2 sleeps no more.
func killHolder(t *testing.T, conn *pgx.Conn, dsn string) (uint32, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), envHelper+"="+dsn, envLock+"="+t.Name())
	cmd.Stderr = os.Stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	var pid uint32
	var app string
	eventually(t, 30*time.Second, func() bool { pid, app = sleeper(t, conn); return pid != 0 }, "the holder sleeps in migration 2")
	assert.True(t, strings.HasPrefix(app, "pgadv/"), "the migration's session carries the holding's tag: %q", app)
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	cmd.Wait()
	_, err := conn.Exec(ctxT(t), "UPDATE migration_sleep SET seconds = 0")
	require.NoError(t, err)
	return pid, app
}
