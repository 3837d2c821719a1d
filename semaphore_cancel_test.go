package advisory_test

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestSemaphoreCancelledAcquireLeavesNothing cancels Acquire at random points (seeded:
// ADVISORY_SEMAPHORE_SEED replays the draws) while another Manager holds every slot and
// frees one now and then: an Acquire either gets a freed slot, and then holds that slot
// only, or returns the ctx error holding nothing, waiting for nothing, and pinning no
// connection.
func TestSemaphoreCancelledAcquireLeavesNothing(t *testing.T) {
	t.Parallel()
	m1, m2 := newManager(t, []string{"application_name=semcancel-m1"}), newManager(t, []string{"application_name=semcancel-m2"})
	ctx := ctxT(t)
	s1, err := m1.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	s2, err := m2.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(semaphoreSeed(t), 0))
	whose := map[uint32]string{} // the backend of every Lock the test made
	held := make([]*advisory.Lock, 2)
	for i := range held {
		held[i], err = s2.TryAcquire(ctx)
		require.NoError(t, err)
		whose[held[i].PID()] = fmt.Sprintf("m2's held[%d] from the start", i)
	}
	var got, cancelled int
	var late []time.Duration
	for round := range 40 {
		wait, free := time.Duration(rng.IntN(40))*time.Millisecond, time.Duration(rng.IntN(60))*time.Millisecond
		victim := rng.IntN(2)
		unlocked := make(chan struct{})
		freed := time.AfterFunc(free, func() { held[victim].Unlock(context.Background()); close(unlocked) })
		actx, cancel := context.WithTimeout(ctx, wait)
		l, err := s1.Acquire(actx)
		returned := time.Now()
		deadline, _ := actx.Deadline()
		cancel()
		if !freed.Stop() {
			<-unlocked
		}
		at := fmt.Sprintf("round %d (wait %v, free %v, victim %d)", round, wait, free, victim)
		if err != nil {
			require.ErrorIs(t, err, context.DeadlineExceeded)
			cancelled++
			late = append(late, returned.Sub(deadline))
			requireOnlyHolders(t, s1, held, whose, at+", Acquire cancelled") // at once: nothing is left to finish
		} else {
			got++
			whose[l.PID()] = "m1's Acquire of " + at
			require.Equal(t, held[victim].Key(), l.Key(), "only the freed slot can be taken")
			require.NoError(t, l.Unlock(ctx))
			// At once: the wait for another slot, cancelled when this one was found, ended
			// before Unlock returned.
			requireOnlyHolders(t, s1, held, whose, at+", after Unlock")
		}
		requireFree(t, s1.TurnstileKey())
		requireNoAcquired(t, m1)
		if held[victim].Err() != nil { // freed: take it back
			held[victim], err = s2.TryAcquire(ctx)
			require.NoError(t, err)
			whose[held[victim].PID()] = fmt.Sprintf("m2's held[%d] taken back after %s", victim, at)
		}
	}
	slices.Sort(late)
	t.Logf("%d acquired, %d cancelled: returned after the deadline by %v median, %v max",
		got, cancelled, late[len(late)/2].Round(100*time.Microsecond), late[len(late)-1].Round(100*time.Microsecond))
	assert.Less(t, late[len(late)/2], time.Second, "prompt")
	assert.Positive(t, cancelled)
}

// TestSemaphoreUnlockEndsTheCancelledWait: a waiting Acquire that gets a slot other than
// the one it waits for on the server cancels that wait, and returns without waiting for
// the cancel to land; once Unlock of the slot it returned has returned, the wait has
// ended too, and holds nothing. (Had the wait queued behind the returned slot's own
// Lock, the Unlock would hand that slot to it.)
func TestSemaphoreUnlockEndsTheCancelledWait(t *testing.T) {
	t.Parallel()
	m1, m2 := newManager(t, []string{"application_name=semunlock-m1"}), newManager(t, []string{"application_name=semunlock-m2"})
	ctx := ctxT(t)
	s1, err := m1.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	s2, err := m2.Semaphore(t.Name(), 2)
	require.NoError(t, err)
	keys, whose := s1.SlotKeys(), map[uint32]string{}
	for round := range 5 {
		held := make([]*advisory.Lock, 2)
		for i := range held {
			held[i], err = s2.TryAcquire(ctx)
			require.NoError(t, err)
			whose[held[i].PID()] = fmt.Sprintf("m2's held[%d] of round %d", i, round)
		}
		got := make(chan *advisory.Lock, 1)
		go func() {
			l, err := s1.Acquire(ctx)
			assert.NoError(t, err)
			got <- l
		}()
		free := -1
		eventually(t, 10*time.Second, func() bool {
			for i, l := range held {
				if lockRowsKey(t, l.Key(), false) == 1 {
					free = 1 - i // the slot not waited on
					return true
				}
			}
			return false
		}, "a waiter on a slot")
		require.NoError(t, held[free].Unlock(ctx))
		l := <-got
		require.NotNil(t, l)
		whose[l.PID()] = fmt.Sprintf("m1's Acquire of round %d", round)
		require.Equal(t, held[free].Key(), l.Key(), "the freed slot (keys %v)", keys)
		require.NoError(t, l.Unlock(ctx))
		requireOnlyHolders(t, s1, held, whose, fmt.Sprintf("round %d, after Unlock", round))
		require.NoError(t, held[1-free].Unlock(ctx))
	}
	requireNoAcquired(t, m1)
}

// semaphoreSeed returns the seed of a randomized semaphore test, from
// ADVISORY_SEMAPHORE_SEED if it is set, and logs it.
func semaphoreSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ADVISORY_SEMAPHORE_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err, "ADVISORY_SEMAPHORE_SEED")
	}
	t.Logf("seed %d (replay: ADVISORY_SEMAPHORE_SEED=%d)", seed, seed)
	return seed
}

// requireOnlyHolders asserts that the live Locks of holders are the only rows of s's
// slots: nobody else holds a slot or waits for one. A stranger is described with whose
// (the Lock that backend last served) and pg_stat_activity, so a failure says who it is.
func requireOnlyHolders(t *testing.T, s *advisory.Semaphore, holders []*advisory.Lock, whose map[uint32]string, at string) {
	t.Helper()
	ok := map[uint32]bool{}
	for _, l := range holders {
		if l.Err() == nil {
			ok[l.PID()] = true
		}
	}
	for i, k := range s.SlotKeys() {
		rows := lockRows(t, k)
		for _, r := range rows {
			if !r.Granted || !ok[r.PID] {
				t.Fatalf("%s: slot %d (key %d) %s by backend %d (last a Lock of the test as %s); %s; the slot's rows: %v",
					at, i, k, map[bool]string{true: "held", false: "waited for"}[r.Granted], r.PID,
					cmp.Or(whose[r.PID], "never"), backendActivity(t, r.PID), rows)
			}
		}
	}
}
