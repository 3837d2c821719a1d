package advisorytest_test

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/advisorytest"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestExistingServerInURLForm: a test binary pointed at an existing server by
// ADVISORY_TEST_DSN in URL form starts nothing, gets a database of its own there, and
// drops it when the test ends.
func TestExistingServerInURLForm(t *testing.T) {
	t.Parallel()
	cfg, err := pgx.ParseConfig(advisorytest.DSN(t))
	require.NoError(t, err)
	if cfg.Password != "" {
		t.Skip("the shared server needs a password; this test builds a URL without one")
	}
	url := fmt.Sprintf("postgres://%s@%s:%d/postgres?sslmode=disable", cfg.User, cfg.Host, cfg.Port)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperProcess$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=exit", pgtest.EnvDSN+"="+url)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	m := regexp.MustCompile(`(?m)^DATABASE=(advisorytest_[0-9a-f]{16})$`).FindStringSubmatch(string(out))
	require.NotNil(t, m, "%s", out)
	assert.NotEqual(t, cfg.Database, m[1])
	n := query[int](t, advisorytest.DSN(t), "SELECT count(*)::int FROM pg_database WHERE datname = $1", m[1])
	assert.Zero(t, n, "database %s was not dropped", m[1])
}
