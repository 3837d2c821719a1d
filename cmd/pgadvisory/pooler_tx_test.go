package main_test

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestRunThroughATransactionPooler (issue 36): behind PgBouncer in transaction mode, with
// a pool of a few server connections, run holds its lock as one open transaction: others
// see it held (status through the pooler), run --no-wait finds it taken, and break
// through the pooler ends it, which run reports as a loss. A SIGKILLed pgadvisory's
// command keeps the holding through descriptor 3, its connection to the pooler, until it
// and every process that kept the descriptor are gone, and only then does the next
// holder's command start.
func TestRunThroughATransactionPooler(t *testing.T) {
	t.Parallel()
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction, pgtest.WithPoolSize(4))
	env := []string{"DATABASE_URL=" + b.DSN()}
	m, _ := holdLock(t, t.Name()+"/observer", "") // a direct observer
	name := t.Name()
	ready, proceed := filepath.Join(t.TempDir(), "ready"), filepath.Join(t.TempDir(), "go")
	p := startEnv(t, env, "run", "--name", name, "--holder-name", name+"/first", "--",
		"sh", "-c", `touch "$1"; while [ ! -e "$2" ]; do sleep 0.02; done`, "sh", ready, proceed)
	require.Eventually(t, func() bool { _, err := os.Stat(ready); return err == nil }, 20*time.Second, 5*time.Millisecond)
	h := waitHeldByApp(t, m, name, name+"/first")

	st := wait(t, startEnv(t, env, "status", "--name", name))
	require.Equal(t, 0, st.code, st.stderr)
	assert.Contains(t, st.stdout, name+"/first", "status through the pooler shows the holder")
	nw := wait(t, startEnv(t, env, "run", "--no-wait", "--name", name, "--", "true"))
	assert.Equal(t, 75, nw.code, nw.stderr)

	br := wait(t, startEnv(t, env, "break", "--name", name, "--yes"))
	require.Equal(t, 0, br.code, br.stderr)
	assert.Contains(t, br.stdout+br.stderr, strconv.FormatUint(uint64(h.PID), 10))
	r := wait(t, p)
	assert.Equal(t, 76, r.code, "run reports the broken holding as lost: %s", r.stderr)

	for _, variant := range []string{"command", "background"} {
		t.Run(variant, func(t *testing.T) {
			took, gap := killedHolderTrial(t, m, env, variant, 1)
			t.Logf("through the pooler, %s: the first command's last process gone %v after the SIGKILL of its "+
				"pgadvisory; the second command started %v after that", variant, took, gap)
		})
	}
}
