package advisory_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// leaderWorkerEnv makes TestLeaderWorkerProcess a leader: "NAME VALUE".
const leaderWorkerEnv = "ADVISORY_LEADER_WORKER"

// TestObserveSeesTheSuccessorOfAKilledLeader: the leader is another process, SIGKILLed;
// the candidate here takes over as soon as the server has freed the lock, and the
// observer, whose re-check is an hour away, sees the candidate as soon as it announces.
func TestObserveSeesTheSuccessorOfAKilledLeader(t *testing.T) {
	t.Parallel()
	ctx := ctxT(t)
	name := t.Name()
	obs := leaderManager(t, "observer", advisory.WithLeaderRecheck(time.Hour))
	ch, err := obs.Observe(ctx, name)
	require.NoError(t, err)

	cmd := exec.Command(os.Args[0], "-test.run=^TestLeaderWorkerProcess$")
	cmd.Env = append(os.Environ(), leaderWorkerEnv+"="+name+" worker")
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	lines := bufio.NewScanner(out)
	require.True(t, lines.Scan(), "the worker leads")
	require.Equal(t, "LEADING", lines.Text())
	lw, _ := awaitLeader(t, ch, 10*time.Second, "the worker", func(l advisory.Leader) bool { return l.Value == "worker" })

	cand := leaderManager(t, "candidate")
	stop := make(chan struct{})
	defer close(stop)
	elected := make(chan time.Time, 1)
	go cand.LeadAs(ctx, name, "candidate", func(ctx context.Context) error {
		elected <- time.Now()
		<-stop
		return nil
	})
	waitForWaiters(t, advisory.KeyOf(name), 1)
	killed := time.Now()
	require.NoError(t, cmd.Process.Signal(syscall.SIGKILL))
	lc, seen := awaitLeader(t, ch, 10*time.Second, "the candidate", func(l advisory.Leader) bool { return l.Value == "candidate" })
	assert.NotEqual(t, lw.Holder.PID, lc.Holder.PID)
	requireHeldBy(t, advisory.KeyOf(name), lc.Holder.PID)
	won := <-elected
	t.Logf("leader SIGKILLed: candidate elected after %v, observed after %v (%v after its election)",
		won.Sub(killed), seen.Sub(killed), seen.Sub(won))
}

// TestLeaderWorkerProcess is not a test: it is the leader of
// TestObserveSeesTheSuccessorOfAKilledLeader (run with leaderWorkerEnv set). It leads
// NAME with VALUE, prints LEADING and waits to be killed.
func TestLeaderWorkerProcess(t *testing.T) {
	spec := os.Getenv(leaderWorkerEnv)
	if spec == "" {
		t.Skip("a helper process of TestObserveSeesTheSuccessorOfAKilledLeader")
	}
	var name, value string
	_, err := fmt.Sscan(spec, &name, &value)
	require.NoError(t, err)
	m := leaderManager(t, "worker")
	m.LeadAs(ctxT(t), name, value, func(ctx context.Context) error {
		os.Stdout.WriteString("LEADING\n")
		<-ctx.Done()
		return nil
	})
}
