package pgtest_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestServerComesFromPGBin: with ADVISORY_TEST_PGBIN set (scripts/pg-version.sh), the
// server the harness started runs those binaries.
func TestServerComesFromPGBin(t *testing.T) {
	bin := os.Getenv(pgtest.EnvPGBin)
	if bin == "" {
		t.Skip(pgtest.EnvPGBin + " is not set")
	}
	conn := connect(t, server(t).DSN())
	var version string
	require.NoError(t, conn.QueryRow(ctxT(t), "SELECT version()").Scan(&version))
	out, err := exec.Command(filepath.Join(bin, "postgres"), "--version").Output()
	require.NoError(t, err)
	want := strings.TrimPrefix(strings.TrimSpace(string(out)), "postgres (PostgreSQL) ")
	assert.True(t, strings.HasPrefix(version, "PostgreSQL "+want+" "), "server %q, binaries %q", version, want)
	t.Log(version)
}
