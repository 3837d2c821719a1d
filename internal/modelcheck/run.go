package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/leak"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// Config is what Run needs of the test harness.
type Config struct {
	// DSN returns the test server's connection string with extra key=value settings; it
	// skips or fails t if there is no server.
	DSN func(t testing.TB, extra ...string) string
	// Admin is a plain pool on the server, for reading pg_locks, terminating backends
	// and CheckToken's transactions.
	Admin *pgxpool.Pool
	// Options are added to the options of every Manager of the model.
	Options []advisory.Option
	// Seed seeds the generator; Duration is how long Run draws batches. See Settings.
	Seed     uint64
	Duration time.Duration
	// Handoffs says that Options turn in-process handoff on (advisory.WithLocalHandoff):
	// the model then also draws batches that make handoffs (see handoff.go).
	Handoffs bool
	// Extra are options added to the Manager of one slot (by index, from 0), and to the
	// Managers that replace it: slots made differently, such as WithoutNamesInActivity,
	// then take the same names as the others.
	Extra map[int][]advisory.Option
	// Shared are the slots (by index) whose Managers share sessions between holdings
	// (advisory.WithSharedSessions, in Extra): the model then also draws batches that take
	// free names on them (see sharedBatch), and Run fails if no check ever saw two live
	// Locks on one backend.
	Shared map[int]bool
	// Parked are shared slots whose Managers wait on one session at most
	// (advisory.WithWaitSessions(1), in Extra): the model then also draws batches of
	// Locks there on names other Managers hold, with one of those released meanwhile, so
	// that Locks wait without a session (see parkBatch).
	Parked map[int]bool
	// Resting returns how many shared sessions of a Manager rest, holding nothing, before
	// they go back to the pool (advisory.RestingForTest): each keeps a pool connection
	// that no live handle accounts for. nil counts none.
	Resting func(*advisory.Manager) int
}

// ManagerOptions returns the options of every Manager of the model.
func (c Config) ManagerOptions() []advisory.Option {
	opts := []advisory.Option{advisory.WithCancelGrace(cancelGrace), advisory.WithFenceTable(modelFenceTable)}
	return append(opts, c.Options...)
}

// Run runs the model for cfg.Duration with cfg.Seed, and fails t with a report and the
// replay line on the first violation.
func Run(t *testing.T, cfg Config) {
	seed, duration := cfg.Seed, cfg.Duration
	t.Logf("seed %d (replay: ADVISORY_MODEL_SEED=%d), running %v", seed, seed, duration)
	before := runtime.NumGoroutine()
	w := newWorld(t, cfg)
	start := time.Now()
	for time.Since(start) < duration {
		w.runStep()
	}
	w.finish()
	if len(cfg.Shared) > 0 && w.sharedSeen == 0 {
		t.Errorf("no check saw two live Locks on one shared session: the run did not test sharing")
	}
	pgtest.SettleReaders(context.Background(), cfg.Admin)
	leak.Goroutines(t, before)
	t.Logf("seed %d: %d steps, %d calls in %v (%v in calls, %v settling); slowest return after a ctx ended: %v\n%s",
		seed, w.step, w.calls, time.Since(start).Round(time.Second), w.inCalls.Round(time.Second),
		w.settling.Round(time.Second), w.maxLate.Round(time.Millisecond), w.stats())
}

// Settings returns the seed (ADVISORY_MODEL_SEED, else the time) and the run time
// (ADVISORY_MODEL_DURATION, else 60s under CI=true and 20s otherwise), failing t on a
// malformed value.
func Settings(t testing.TB) (uint64, time.Duration) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("ADVISORY_MODEL_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("ADVISORY_MODEL_SEED=%q: %v", s, err)
		}
	}
	duration := 20 * time.Second
	if pgtest.InCI() {
		duration = 60 * time.Second
	}
	if s := os.Getenv("ADVISORY_MODEL_DURATION"); s != "" {
		var err error
		if duration, err = time.ParseDuration(s); err != nil {
			t.Fatalf("ADVISORY_MODEL_DURATION=%q: %v", s, err)
		}
	}
	return seed, duration
}

// newWorld opens the model's Managers on cfg's server and creates the fencing tables;
// the Managers are closed when the test ends.
func newWorld(t *testing.T, cfg Config) *world {
	seed := cfg.Seed
	w := &world{t: t, seed: seed, admin: cfg.Admin, rng: rand.New(rand.NewPCG(seed, 0x5eed)),
		prefix: fmt.Sprintf("model-%d/", os.Getpid()), dead: map[uint32]bool{}, checks: map[opKind]int{},
		outcomes: map[string]map[string]int{}, spent: map[string]time.Duration{},
		verbose: os.Getenv("ADVISORY_MODEL_VERBOSE") != "", handoffs: cfg.Handoffs, shared: cfg.Shared, parked: cfg.Parked,
		resting: cfg.Resting}
	for i := range modelNames {
		w.names = append(w.names, fmt.Sprintf("k%d", i))
	}
	for i := range modelManagers {
		app := fmt.Sprintf("advmodel-%d-m%d", os.Getpid(), i)
		s := &mgrSlot{idx: i, app: app, dsn: cfg.DSN(t, "application_name="+app),
			opts: append(cfg.ManagerOptions(), cfg.Extra[i]...)}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := advisory.New(ctx, s.dsn, s.opts...)
		cancel()
		if err != nil {
			t.Fatalf("New: %v", err)
		}
		s.m = m
		w.slots = append(w.slots, s)
	}
	w.setupFence()
	// On failure, Close releases whatever is left (also what a bug leaked).
	t.Cleanup(func() {
		if w.hung {
			return // Close would wait for the hung calls
		}
		for _, s := range w.slots {
			s.m.Close()
		}
	})
	return w
}

// runStep runs one batch, judges it, and checks the invariants; it stops the test with
// a report on the first violation.
func (w *world) runStep() {
	w.step++
	ops := w.genBatch()
	w.batch = ops
	t0 := time.Now()
	hang := runBatch(ops)
	w.inCalls += time.Since(t0)
	if hang != "" {
		w.hung = true
		w.record(ops)
		w.fail([]string{fmt.Sprintf("the batch did not return within %v; goroutines:\n%s", hangBound, hang)})
	}
	w.record(ops)
	bad := w.judge(ops)
	if len(bad) == 0 {
		t1 := time.Now()
		bad = w.settle()
		w.settling += time.Since(t1)
	}
	if len(bad) == 0 {
		bad = w.judgeFence(ops)
	}
	if len(bad) > 0 {
		w.fail(bad)
	}
	w.prune()
}

// finish releases every Lock and Session, closes the Managers and checks that nothing is
// left on the server.
func (w *world) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var bad []string
	for _, h := range w.liveLocks() {
		switch err := h.l.Unlock(ctx); {
		case err == nil:
			h.ended(txCommitted, "the final Unlock")
		case !h.poisoned() || errors.Is(err, advisory.ErrLockLost) || errors.Is(err, advisory.ErrNotHeld):
			bad = append(bad, fmt.Sprintf("final Unlock of %v: %v", h, err))
		}
		h.state = hReleased
	}
	for _, h := range w.liveSessions() {
		switch err := h.S.Close(ctx); {
		case err == nil:
			h.ended(txCommitted, "the final Close")
		case !h.poisoned() || errors.Is(err, advisory.ErrLockLost) || errors.Is(err, advisory.ErrNotHeld):
			bad = append(bad, fmt.Sprintf("final Close of %v: %v", h, err))
		}
		h.state = hReleased
	}
	bad = append(bad, w.settle()...)
	bad = append(bad, w.finalTxRows()...)
	for _, s := range w.slots {
		s.m.Close()
	}
	bad = append(bad, w.settle()...)
	if len(bad) > 0 {
		w.fail(bad)
	}
}
