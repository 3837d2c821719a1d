package main

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"time"

	"github.com/pgadvisory/advisory"
)

// run --slots N takes one slot of the semaphore --name with N slots
// (advisory.Manager.Semaphore) instead of the lock --name itself: at most N commands run
// at once across every machine. The slot is an ordinary Lock on "NAME#slot/i", so
// everything run does with a lock once it holds it (draining the slot's earlier
// holders' work, handing CMD the connection on fd 3, stopping CMD and exiting 76 if it
// is lost) is done with the slot, by the same code. What differs is only how it is
// taken: TryAcquire for the first try and --no-wait, Acquire for the wait, the
// semaphore's holders for the reports.

// checkSlots refuses what --slots cannot do. It runs after --name, --key, --shared and
// --token were checked.
func (r *runner) checkSlots(fs *flag.FlagSet) error {
	given := false
	fs.Visit(func(f *flag.Flag) { given = given || f.Name == "slots" })
	cmd := fs.Name()
	switch {
	case !given:
		return nil
	case r.slots < 1 || r.slots > advisory.MaxSemaphoreLimit:
		return usageError(cmd, "--slots %d: a semaphore's limit is between 1 and %d", r.slots, advisory.MaxSemaphoreLimit)
	case r.lock.name == "":
		return usageError(cmd, "--slots needs --name: a semaphore is named (its slots are the locks "+
			`"NAME#slot/0" and on), it has no single key`)
	case r.shared:
		return usageError(cmd, "--slots and --shared exclude each other: a slot is held exclusively; "+
			"for N holders at once --slots N is the way, for any number --shared")
	case r.fence.token:
		return usageError(cmd, "--token cannot be used with --slots: each slot would have its own "+
			"sequence of tokens, and holders of different slots run at the same time by design, "+
			"so no token could fence one off from another")
	}
	// The longest of the semaphore's lock names; Manager.Semaphore would refuse it later.
	for _, suffix := range []string{fmt.Sprintf("#slot/%d", r.slots-1), "#turnstile"} {
		if err := advisory.ValidateName(r.lock.name + suffix); err != nil {
			return usageError(cmd, "--name with --slots: the slot names \"NAME#slot/i\" must be valid names: %v", err)
		}
	}
	r.lock.slots = r.slots
	// A waiting Acquire pins up to five connections besides its slot (the turnstile, the
	// LISTEN, the wait for one slot, tries of the others, a slot whose wait is being
	// abandoned); the reports of who holds the slots need one more.
	r.conn.conns = 8
	return nil
}

// trySlot tries for a free slot, making the semaphore first: acquire always tries before
// it waits, so lockCall finds r.sem made.
func (r *runner) trySlot(ctx context.Context, m *advisory.Manager) (*advisory.Lock, error) {
	if r.sem == nil {
		sem, err := m.Semaphore(r.lock.name, r.slots)
		if err != nil {
			return nil, err
		}
		r.sem = sem
	}
	return r.sem.TryAcquire(ctx)
}

// take takes the lock (acquire), and with --slots names the slot held from then on: the
// messages about draining, the token and loss name the slot's lock, "NAME#slot/i".
func (r *runner) take(ctx context.Context, m *advisory.Manager) (*advisory.Lock, error) {
	l, err := r.acquire(ctx, m)
	if err == nil && r.slots > 0 {
		r.lock = lockTarget{key: l.Key(), name: l.Name()}
	}
	return l, err
}

// holdersOf returns the sessions that hold or wait for the lock; with --slots, any slot
// of the semaphore.
func (r *runner) holdersOf(ctx context.Context, m *advisory.Manager) ([]advisory.Holder, error) {
	if r.sem != nil {
		return r.sem.Holders(ctx)
	}
	return m.HoldersKey(ctx, r.lock.key)
}

// describe says who holds the lock; with --slots, whether the semaphore is full and who
// holds its slots.
func (r *runner) describe(hs []advisory.Holder) string {
	desc := describeHolders(hs, time.Now())
	if r.sem == nil {
		return desc
	}
	taken := 0
	for _, h := range hs {
		if h.Granted {
			taken++
		}
	}
	switch {
	case taken >= r.slots:
		return fmt.Sprintf("full (%s taken), %s", allSlots(r.slots), desc)
	case taken == 0:
		return fmt.Sprintf("free right now (none of %s taken)", allSlots(r.slots)) + waitingOf(desc)
	}
	return fmt.Sprintf("%d of %d slots taken right now, %s", taken, r.slots, desc)
}

// waitingOf is the "; N waiting" end of a describeHolders text, if any.
func waitingOf(desc string) string {
	if _, w, ok := strings.Cut(desc, "; "); ok {
		return "; " + w
	}
	return ""
}

// allSlots is "its slot" or "all N slots".
func allSlots(n int) string {
	if n == 1 {
		return "its slot"
	}
	return fmt.Sprintf("all %d slots", n)
}
