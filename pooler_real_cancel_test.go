package advisory_test

import (
	"context"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestPgBouncerSurvivesTheLibrarysCancels (issue 43, item 11): PgBouncer 1.18 exits on a
// cancel request whose client closed the connection before PgBouncer forwarded it ("bad
// client state: 0", pgbouncer issue 801). The library's cancels used to be bounded by the
// cancel grace, and beside two CPU hogs a bound is cut short: the root package's pooler
// tests lost their PgBouncer in "a cancel racing the grant". Here, beside two CPU hogs,
// cancels race grants (the default grace), and many waits are cancelled at once by a
// Manager with the smallest grace (10 ms, so that the bound runs out as often as it can);
// PgBouncer must still run, the same process, and never log the crash.
func TestPgBouncerSurvivesTheLibrarysCancels(t *testing.T) {
	pgtest.Need(t, srv, startErr)
	b := pgtest.PgBouncerForTest(t, srv, pgtest.PoolTransaction)
	pid := b.PID()
	require.NotZero(t, pid)
	cpuHogs(t, 2, 2*time.Minute)
	holderM := pooledManager(t, b)
	m := pooledManager(t, b)
	short := pooledManager(t, b, advisory.WithCancelGrace(10*time.Millisecond))

	t.Run("cancels racing grants", func(t *testing.T) { cancelRacingTheGrant(t, holderM, m, 60) })
	t.Run("many waits cancelled at once", func(t *testing.T) { manyWaitsCancelled(t, holderM, short, 8, 25) })
	for _, m := range []*advisory.Manager{m, short, holderM} {
		m.Close() // waits until PgBouncer answered every cancel
	}
	log := b.Log()
	if lines := strings.Split(strings.TrimSpace(log), "\n"); len(lines) > 12 {
		log = strings.Join(lines[len(lines)-12:], "\n") // the end tells the crash
	}
	require.False(t, strings.Contains(b.Log(), "bad client state"), "PgBouncer crashed on a cancel request:\n%s", log)
	require.Equal(t, pid, b.PID(), "PgBouncer still runs, the same process; the end of its log:\n%s", log)
}

// manyWaitsCancelled: while holderM holds a key, workers goroutines of m each wait for it
// rounds times, each wait cancelled by a ctx of 1 to 8 ms.
func manyWaitsCancelled(t *testing.T, holderM, m *advisory.Manager, workers, rounds int) {
	held, err := holderM.Lock(ctxT(t), t.Name())
	require.NoError(t, err)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), time.Duration(1+(w+i)%8)*time.Millisecond)
				l, err := m.Lock(ctx, t.Name())
				cancel()
				if l != nil {
					assert.Failf(t, "granted", "a Lock got a key held elsewhere")
					l.Unlock(context.Background())
				}
				assert.ErrorIs(t, err, context.DeadlineExceeded)
			}
		}()
	}
	wg.Wait()
	require.NoError(t, held.Unlock(ctxT(t)))
}

// cpuHogs runs n processes that spin on a CPU (yes > /dev/null) until the test ends or
// limit has passed.
func cpuHogs(t *testing.T, n int, limit time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	var cmds []*exec.Cmd
	for range n {
		cmd := exec.CommandContext(ctx, "yes")
		if err := cmd.Start(); err != nil {
			cancel()
			t.Fatalf("start a CPU hog: %v", err)
		}
		cmds = append(cmds, cmd)
	}
	t.Cleanup(func() {
		cancel()
		for _, cmd := range cmds {
			cmd.Wait()
		}
	})
}
