package advisory_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestObserveConvergesRandomized drives three candidates (LeadAs, each with its own value)
// through seeded random changes (a leader steps down, its session is terminated with or
// without a candidate waiting, a candidate joins) while an observer whose re-check is an
// hour away follows (ADVISORY_OBSERVE_SEED replays a seed). After each change, the observer's latest value must come to name
// the session pg_locks shows holding the lock, with that candidate's value: every change
// reaches it through a notification, none is lost or left stale.
func TestObserveConvergesRandomized(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if v, err := strconv.ParseUint(os.Getenv("ADVISORY_OBSERVE_SEED"), 10, 64); err == nil {
		seed = v
	}
	rng := rand.New(rand.NewPCG(seed, 0))
	t.Logf("seed %d (replay: ADVISORY_OBSERVE_SEED=%d)", seed, seed)
	ctx := ctxT(t)
	name := t.Name()
	key := advisory.KeyOf(name)
	obs := leaderManager(t, "observer", advisory.WithLeaderRecheck(time.Hour))
	ch, err := obs.Observe(ctx, name)
	require.NoError(t, err)
	var latest atomic.Pointer[advisory.Leader]
	go func() {
		for ld := range ch {
			latest.Store(&ld)
		}
	}()

	type cand struct {
		m    *advisory.Manager
		stop chan struct{}
		done <-chan error
	}
	cands := make([]*cand, 3)
	join := func(i int) {
		c := cands[i]
		c.stop = make(chan struct{})
		c.done = leadUntil(ctx, c.m, name, fmt.Sprintf("cand-%d", i), c.stop)
	}
	for i := range cands {
		cands[i] = &cand{m: leaderManager(t, fmt.Sprintf("cand-%d", i))}
		join(i)
	}
	running := func(i int) bool { return cands[i].stop != nil }
	for step := range 12 {
		// The truth: who holds the lock, and who that is.
		var holder uint32
		eventually(t, 10*time.Second, func() bool {
			for _, r := range lockRows(t, key) {
				if r.Granted {
					holder = r.PID
					return true
				}
			}
			return false
		}, "step %d: somebody leads", step)
		leaderOf := -1
		for i := range cands {
			if !running(i) {
				continue
			}
			ld, err := cands[i].m.Leader(ctx, name)
			require.NoError(t, err)
			if ld.Holder.PID == holder && ld.Holder.ApplicationName == fmt.Sprintf("cand-%d", i) {
				leaderOf = i
			}
		}
		require.GreaterOrEqual(t, leaderOf, 0, "step %d: the holder %d is a candidate", step, holder)
		want := fmt.Sprintf("cand-%d", leaderOf)
		eventually(t, 10*time.Second, func() bool {
			ld := latest.Load()
			return ld != nil && ld.Elected && ld.Holder.PID == holder && ld.Value == want
		}, "step %d (seed %d): the observer names %s (pid %d); it says %+v", step, seed, want, holder, latest.Load())

		switch action := rng.IntN(3); {
		case action == 0: // the leader steps down; it joins again later
			close(cands[leaderOf].stop)
			require.NoError(t, <-cands[leaderOf].done)
			cands[leaderOf].stop = nil
		case action == 1: // its session is terminated: it campaigns again
			terminate(t, holder)
			eventually(t, 10*time.Second, func() bool {
				for _, r := range lockRows(t, key) {
					if r.PID == holder {
						return false
					}
				}
				return true
			}, "step %d: the terminated session is gone", step)
		default: // somebody who stepped down joins again
			for i := range cands {
				if !running(i) {
					join(i)
					break
				}
			}
		}
		if !running(0) && !running(1) && !running(2) {
			join(rng.IntN(3))
		}
	}
	for i := range cands { // stop all first: a waiting candidate returns once it leads
		if running(i) {
			close(cands[i].stop)
		}
	}
	for i := range cands {
		if running(i) {
			require.NoError(t, <-cands[i].done)
		}
	}
	requireFree(t, key)
}
