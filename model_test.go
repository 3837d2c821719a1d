package advisory_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/internal/leak"
	"github.com/pgadvisory/advisory/internal/pgtest"
)

// TestModel is a model-based randomized test of the whole public API.
//
// Three Managers (each with its own application_name), their Locks and Sessions, and a
// model of what each holds. Every step runs a batch of one to three calls at once, drawn
// from a seeded generator: Lock, TryLock and their shared forms, Lock.Unlock (also twice,
// and after a loss), Session and its Lock, TryLock, LockAll, TryLockAll, Unlock and Close,
// Do and Lead with a function that returns nil, an error, panics or waits, Holders,
// pg_terminate_backend of a random holder, and Manager.Close followed by a new Manager;
// and the fencing API: Lock.BeginFunc, Session.BeginFunc and DoTx (fn as for Do, after
// inserting a row), Lock.Token and CheckToken (see model_fence_*_test.go).
// Few lock names, so calls contend. Each call's ctx is already done, cancelled by a timer
// at a random instant, given a random deadline, cancelled at its n-th Err check (see
// checkCtx), or only bounded (2.5 s).
//
// After a batch, each call's result is judged against the contract, given what the model
// knew before (see model_judge_test.go): a call whose ctx was already done returns ctx's
// error and changes nothing; a call returns within 1 s of its ctx ending; TryLock of a held
// key is ErrLocked; Unlock twice is ErrNotHeld; calls after Close are ErrClosed; after Do and
// Lead return (by panic too) they hold nothing; a terminated holder is told (ErrLockLost).
// Then the invariants are polled until the server agrees (see model_check_test.go): every
// live handle's locks are granted in pg_locks to its backend; every lock of our backends is
// reported by a live handle; no waiters; holders of one key are compatible; each Manager's
// acquired connections equal its live Locks and Sessions. Then the fenced calls' rows: committed
// if and only if the call returned nil (a loss overlapping the COMMIT may be in doubt),
// on the lock's backend, which held the keys at COMMIT; and the tokens against the table. At the end, after closing
// everything: nothing in pg_locks, no goroutine left. The Managers use a short
// WithCancelGrace (see cancelGrace): the 1 s bound is about calls that ignore their ctx,
// not about PostgreSQL dropping a CancelRequest under load.
//
// ADVISORY_MODEL_SEED replays a seed (the calls drawn depend on results too, so a replay
// follows the same path as long as the results are the same); ADVISORY_MODEL_DURATION sets
// the run time (default 60s under CI=true, else 20s); ADVISORY_MODEL_VERBOSE=1 logs every
// step. Skipped with -short.
func TestModel(t *testing.T) {
	if testing.Short() {
		t.Skip("model-based randomized test: skipped with -short")
	}
	seed, duration := modelSettings(t)
	runModel(t, seed, duration)
}

// TestModelChecked is TestModel, for a third of its time, with every connection keeping
// the per-statement ownership check (the statements a connection through a proxy or NAT
// runs), so that the model also drives those statements and their clean-ups.
func TestModelChecked(t *testing.T) {
	if testing.Short() {
		t.Skip("model-based randomized test: skipped with -short")
	}
	seed, duration := modelSettings(t)
	modelChecked = true
	defer func() { modelChecked = false }()
	requireCheckedStatements(t)
	runModel(t, seed, duration/3)
}

// requireCheckedStatements checks that a Manager with the model's options runs the
// checked lock statement: else TestModelChecked would test the bare ones twice.
func requireCheckedStatements(t *testing.T) {
	ctx := ctxT(t)
	m, err := advisory.New(ctx, dsn(t), modelOptions()...)
	require.NoError(t, err)
	defer m.Close()
	l, err := m.Lock(ctx, t.Name())
	require.NoError(t, err)
	defer l.Unlock(ctx)
	var q string
	require.NoError(t, admin.QueryRow(ctx, "SELECT query FROM pg_stat_activity WHERE pid = $1", int32(l.PID())).Scan(&q))
	require.Contains(t, q, "pg_catalog.current_setting('advisory.owner', true) OPERATOR(pg_catalog.=) $2")
}

func runModel(t *testing.T, seed uint64, duration time.Duration) {
	t.Logf("seed %d (replay: ADVISORY_MODEL_SEED=%d), running %v", seed, seed, duration)
	before := runtime.NumGoroutine()
	w := newWorld(t, seed)
	start := time.Now()
	for time.Since(start) < duration {
		w.runStep()
	}
	w.finish()
	leak.Goroutines(t, before)
	t.Logf("seed %d: %d steps, %d calls in %v (%v in calls, %v settling); slowest return after a ctx ended: %v\n%s",
		seed, w.step, w.calls, time.Since(start).Round(time.Second), w.inCalls.Round(time.Second),
		w.settling.Round(time.Second), w.maxLate.Round(time.Millisecond), w.stats())
}

func modelSettings(t *testing.T) (uint64, time.Duration) {
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

func newWorld(t *testing.T, seed uint64) *world {
	w := &world{t: t, seed: seed, rng: rand.New(rand.NewPCG(seed, 0x5eed)),
		prefix: fmt.Sprintf("model-%d/", os.Getpid()), dead: map[uint32]bool{}, checks: map[opKind]int{},
		outcomes: map[string]map[string]int{}, spent: map[string]time.Duration{},
		verbose: os.Getenv("ADVISORY_MODEL_VERBOSE") != ""}
	for i := range modelNames {
		w.names = append(w.names, fmt.Sprintf("k%d", i))
	}
	for i := range modelManagers {
		app := fmt.Sprintf("advmodel-%d-m%d", os.Getpid(), i)
		s := &mgrSlot{idx: i, app: app, dsn: dsn(t, "application_name="+app)}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		m, err := advisory.New(ctx, s.dsn, modelOptions()...)
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

// record adds the batch to the trace of the last 30 steps.
func (w *world) record(ops []*op) {
	var b strings.Builder
	fmt.Fprintf(&b, "step %d:", w.step)
	for _, o := range ops {
		fmt.Fprintf(&b, "\n    [%d] %v → %s", o.idx, o, o.outcome())
	}
	if w.verbose {
		w.t.Log(b.String())
	}
	if w.trace = append(w.trace, b.String()); len(w.trace) > 30 {
		w.trace = w.trace[1:]
	}
}

func (w *world) fail(bad []string) {
	w.t.Helper()
	w.t.Fatalf("seed %d, step %d: the model is violated:\n  - %s\n\nlast %d steps (newest last):\n%s\n\nmodel (live handles):\n%s\npg_locks:\n%s\nreplay: ADVISORY_MODEL_SEED=%d go test -race -run TestModel .",
		w.seed, w.step, strings.Join(bad, "\n  - "), len(w.trace), strings.Join(w.trace, "\n"),
		w.describeModel(), w.describeServer(), w.seed)
}

// finish releases every Lock and Session, closes the Managers and checks that nothing is
// left on the server.
func (w *world) finish() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var bad []string
	for _, h := range w.liveLocks() {
		if err := h.l.Unlock(ctx); err != nil {
			bad = append(bad, fmt.Sprintf("final Unlock of %v: %v", h, err))
		}
		h.state = hReleased
	}
	for _, h := range w.liveSessions() {
		if err := h.S.Close(ctx); err != nil {
			bad = append(bad, fmt.Sprintf("final Close of %v: %v", h, err))
		}
		h.state = hReleased
	}
	bad = append(bad, w.settle()...)
	for _, s := range w.slots {
		s.m.Close()
	}
	bad = append(bad, w.settle()...)
	if len(bad) > 0 {
		w.fail(bad)
	}
}

// stats lists the outcomes per call.
func (w *world) stats() string {
	var kinds []string
	for k := range w.outcomes {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	var b strings.Builder
	fmt.Fprintf(&b, "  ctx checks seen per call: %v\n  %s\n", w.checks, w.fence.stats())
	for _, k := range kinds {
		var parts []string
		for class, n := range w.outcomes[k] {
			parts = append(parts, fmt.Sprintf("%s %d", class, n))
		}
		sort.Strings(parts)
		fmt.Fprintf(&b, "  %-13s %6v  %s\n", k, w.spent[k].Round(time.Second), strings.Join(parts, ", "))
	}
	return b.String()
}
