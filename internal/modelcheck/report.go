package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/pgadvisory/advisory"
)

// What the model reports: the trace of the last steps, a failure with its replay line,
// and the statistics of a run.

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
	w.t.Fatalf("seed %d, step %d: the model is violated:\n  - %s\n\nlast %d steps (newest last):\n%s\n\nmodel (live handles):\n%s\npg_locks:\n%s\npools and machine:\n%s\nreplay: ADVISORY_MODEL_SEED=%d go test -race -run TestModel .",
		w.seed, w.step, strings.Join(bad, "\n  - "), len(w.trace), strings.Join(w.trace, "\n"),
		w.describeModel(), w.describeServer(), w.describePools(), w.seed)
}

// describePools lists each Manager's pool (what a call that could not get a connection
// in time met: connections in use, idle, being opened, and the pool's waits so far), the
// server's backends and the machine's load, so that a report tells a slow machine from a
// connection the library failed to give back.
func (w *world) describePools() string {
	var b strings.Builder
	for _, s := range w.slots {
		st := s.m.Stat()
		mean := time.Duration(0)
		if n := st.AcquireCount(); n > 0 {
			mean = st.AcquireDuration() / time.Duration(n)
		}
		fmt.Fprintf(&b, "  %v: %d acquired, %d idle, %d being opened, %d of %d in all; %d acquires (mean %v), %d of them waited for a new connection, %d cancelled\n",
			s, st.AcquiredConns(), st.IdleConns(), st.ConstructingConns(), st.TotalConns(), st.MaxConns(),
			st.AcquireCount(), mean.Round(time.Microsecond), st.EmptyAcquireCount(), st.CanceledAcquireCount())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var backends, active int
	if err := w.admin.QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE state = 'active') FROM pg_catalog.pg_stat_activity WHERE backend_type = 'client backend'`).Scan(&backends, &active); err != nil {
		fmt.Fprintf(&b, "  pg_stat_activity: %v\n", err)
	} else {
		fmt.Fprintf(&b, "  server: %d client backends, %d active\n", backends, active)
	}
	if load, err := os.ReadFile("/proc/loadavg"); err == nil {
		fmt.Fprintf(&b, "  load average: %s", load)
	}
	return b.String()
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
	if w.sharedPeak > 0 {
		fmt.Fprintf(&b, "  shared sessions: %d checks saw several live Locks on one, at most %d\n", w.sharedSeen, w.sharedPeak)
	}
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

func (w *world) count(o *op) {
	class := errClass(o.res.err)
	if o.res.panicked != nil {
		class = "panic"
	}
	if w.outcomes[o.kind.String()] == nil {
		w.outcomes[o.kind.String()] = map[string]int{}
	}
	w.outcomes[o.kind.String()][class]++
	w.spent[o.kind.String()] += o.res.end.Sub(o.res.start)
	w.calls++
}

// describeModel summarises the model for a failure report.
func (w *world) describeModel() string {
	var b strings.Builder
	for _, h := range w.liveLocks() {
		fmt.Fprintf(&b, "  %v\n", h)
	}
	for _, h := range w.liveSessions() {
		fmt.Fprintf(&b, "  %v holds %v\n", h, h.held)
	}
	if b.Len() == 0 {
		return "  (nothing held)\n"
	}
	return b.String()
}

// errClass says which contract an error falls under, for the statistics.
func errClass(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return "ctx"
	case errors.Is(err, advisory.ErrLocked):
		return "locked"
	case errors.Is(err, advisory.ErrNotHeld):
		return "notheld"
	case errors.Is(err, advisory.ErrLockLost):
		return "lost"
	case errors.Is(err, advisory.ErrClosed):
		return "closed"
	case errors.Is(err, advisory.ErrStaleToken):
		return "stale"
	case errors.Is(err, advisory.ErrSharedToken):
		return "shared"
	case errors.Is(err, advisory.ErrTransactionHolding):
		return "txholding"
	case errors.Is(err, advisory.ErrNotReentrant):
		return "notreentrant"
	case errors.Is(err, errModelFn):
		return "fnerr"
	case isDeadlock(err):
		return "deadlock"
	}
	return "other"
}

// describeServer lists the server's rows for a failure report.
func (w *world) describeServer() string {
	rows, err := w.serverRows()
	if err != nil {
		return "  " + err.Error() + "\n"
	}
	var b strings.Builder
	for _, r := range rows {
		b.WriteString("  " + r.describe(w) + "\n")
	}
	if b.Len() == 0 {
		return "  (no rows)\n"
	}
	return b.String()
}
