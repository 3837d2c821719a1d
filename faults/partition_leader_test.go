package faults_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestObserveSeesTheSuccessorOfAPartitionedLeader (issue 23, item 3): the leader is
// pgadvisory run in the namespace (run announces itself); a candidate (Lead) and an
// observer whose re-check is an hour away run here. The namespace is cut off: the server
// frees the leader's lock within its keepalive bound, the candidate is elected, and the
// observer sees it by the candidate's notification, well within a second of the election.
func TestObserveSeesTheSuccessorOfAPartitionedLeader(t *testing.T) {
	ctx := needPartitionLab(t)
	cli := buildCLI(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	bounds := newManager(t, runClientKeepalive).Bounds()
	obs := newManager(t, "application_name=observer", advisory.WithLeaderRecheck(time.Hour))
	ch, err := obs.Observe(ctx, name)
	require.NoError(t, err)

	leaderDSN := fmt.Sprintf("host=%s port=%d user=postgres dbname=postgres sslmode=disable %s",
		netLab.serverIP, srv.Port(), runClientKeepalive)
	h := startMerged(t, nil, "ip", "netns", "exec", netLab.ns, cli, "run", "--name", name, "--dsn", leaderDSN,
		"--", "sh", "-c", "echo LEADING; exec sleep 300")
	h.expect(t, "LEADING", 30*time.Second)
	leaderPID := holderOf(t, key)
	require.NotZero(t, leaderPID)
	ld := await(t, ch, 10*time.Second, "the run as leader", func(l advisory.Leader) bool { return l.Holder.PID == leaderPID })
	assert.Contains(t, ld.Holder.ClientAddr, netLab.clientIP)

	cand := newManager(t, "application_name=candidate")
	elected := make(chan time.Time, 1)
	candCtx, stop := context.WithCancel(ctx)
	defer stop()
	go cand.Lead(candCtx, name, func(ctx context.Context) error {
		elected <- time.Now()
		<-ctx.Done()
		return nil
	})
	require.Eventually(t, func() bool { return waiters(t, key) == 1 }, 10*time.Second, 10*time.Millisecond)

	require.NoError(t, netLab.partition())
	cut := time.Now()
	next := await(t, ch, bounds.ServerFreesBy+30*time.Second, "the candidate as leader",
		func(l advisory.Leader) bool { return l.Elected && l.Holder.PID != leaderPID })
	seen := time.Now()
	won := <-elected
	assert.Equal(t, "candidate", next.Holder.ApplicationName)
	assert.Equal(t, next.Holder.PID, holderOf(t, key))
	t.Logf("leader cut off: candidate elected %.2fs after the cut (server frees by %v), observed %v after its election",
		won.Sub(cut).Seconds(), bounds.ServerFreesBy, seen.Sub(won))
	// The server bound's tolerance is assertPartitionBounds' (the kernel's keepalive timers
	// fire late by up to about a second under load); the election adds the drain's query
	// and the announcement's commit.
	assert.LessOrEqual(t, won.Sub(cut), bounds.ServerFreesBy+2*time.Second, "elected once the server freed the lock")
	assert.Less(t, seen.Sub(won), time.Second, "observed by the election's notification, not a re-check")
	require.NoError(t, netLab.heal())
	h.kill()
}

// await reads ch until a Leader satisfies cond; it fails the test after limit.
func await(t *testing.T, ch <-chan advisory.Leader, limit time.Duration, what string,
	cond func(advisory.Leader) bool) advisory.Leader {
	t.Helper()
	deadline := time.After(limit)
	for {
		select {
		case ld, ok := <-ch:
			require.True(t, ok, "the observation ended while waiting for %s", what)
			require.NoError(t, ld.Err, "reading the leader")
			if cond(ld) {
				return ld
			}
		case <-deadline:
			t.Fatalf("no %s observed within %v", what, limit)
		}
	}
}
