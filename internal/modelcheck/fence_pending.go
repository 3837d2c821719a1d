package modelcheck

import (
	"errors"
	"fmt"
	"time"

	"github.com/pgadvisory/advisory"
)

// The rows of BeginFunc on a transaction holding (a Lock or Session of a Manager whose
// Holding() is HoldingTransaction). fn runs in a savepoint of the holding's own
// transaction: a call that returned nil leaves its row pending in that transaction,
// invisible to every other session, until the holding's Unlock or Close commits it; a call
// that failed leaves nothing. So each such row is judged with its holding, after every
// batch: while the holding is live none of its rows is committed; once it ended, its
// pending rows are committed if its Unlock or Close returned nil, none of them if it was
// lost, and all or none if a termination, a Close of its Manager or its ctx cut the
// COMMIT (in doubt); the rows of calls that failed never are.

// txHolding is what the model keeps of a Lock's or Session's transaction.
type txHolding struct {
	tx    bool    // its Manager holds by transaction
	rows  []txRow // its BeginFunc rows (fn ran), not judged to the end yet
	end   txEnd   // how its transaction ended, once the handle has
	endBy string  // the call that ended it that way, for messages
	// releaseStart: when the Unlock or Close that ended it in doubt began (see txWait).
	releaseStart time.Time
}

// txRow is one row a BeginFunc on a transaction holding inserted.
type txRow struct {
	id        int64
	call      string // the BeginFunc, for messages
	pending   bool   // it returned nil: the row waits for the holding's COMMIT
	poison    bool   // the row fails the COMMIT (see fenceInput.poison)
	insertPID uint32
	fnBad     []string // what fn found wrong in pg_locks
}

// txEnd is how a holding's transaction ended, as far as the model can tell; a later,
// surer call may raise it (see txHolding.ended).
type txEnd int

const (
	txRolledBack txEnd = iota // lost, or never committed: no row commits
	txInDoubt                 // its COMMIT was cut: all of the pending rows commit, or none
	txCommitted               // Unlock or Close returned nil: every pending row committed
)

func (e txEnd) String() string {
	return [...]string{"rolled back (lost)", "in doubt", "committed"}[e]
}

// ended records how the transaction ended, if that says more than what was known.
func (t *txHolding) ended(e txEnd, by string) {
	if e > t.end || t.endBy == "" {
		t.end, t.endBy = max(t.end, e), by
	}
}

// pending reports whether a BeginFunc returned nil on the holding, so that its COMMIT
// has writes to commit.
func (t *txHolding) pending() bool {
	for _, r := range t.rows {
		if r.pending {
			return true
		}
	}
	return false
}

// poisoned reports whether a row pending in the holding's transaction fails its COMMIT.
func (t *txHolding) poisoned() bool {
	for _, r := range t.rows {
		if r.pending && r.poison {
			return true
		}
	}
	return false
}

func (f *fenceState) txStats() string {
	if f.txCommitted+f.txDropped+f.txDoubt+f.txRefused == 0 {
		return ""
	}
	return fmt.Sprintf("\n  transaction holdings: pending rows committed at Unlock or Close: %d, dropped with a lost holding: %d; "+
		"COMMITs in doubt: %d (%d rows committed); Unlocks and Closes failed by a poisoned row: %d; "+
		"BeginTxFunc with options refused: %d", f.txCommitted, f.txDropped, f.txDoubt, f.txDoubtRows, f.txPoisoned, f.txRefused)
}

// onTxHolding reports whether o's target, a Lock or a Session, holds by transaction.
func (o *op) onTxHolding() bool {
	return (o.lh != nil && o.lh.tx) || (o.sh != nil && o.sh.tx)
}

// txHolding returns the transaction state of o's target, a Lock or a Session.
func (o *op) txHolding() *txHolding {
	if o.lh != nil {
		return &o.lh.txHolding
	}
	return &o.sh.txHolding
}

// txHandle is a Lock or Session seen as a transaction holding.
type txHandle struct {
	name  string
	pid   uint32
	state hState
	t     *txHolding
}

// txHandles returns the Locks and Sessions that hold by transaction and have rows to judge.
func (w *world) txHandles() (out []txHandle) {
	for _, h := range w.locks {
		if h.tx && len(h.rows) > 0 {
			out = append(out, txHandle{h.String(), h.pid, h.state, &h.txHolding})
		}
	}
	for _, h := range w.sessions {
		if h.tx && len(h.rows) > 0 {
			out = append(out, txHandle{h.String(), h.pid, h.state, &h.txHolding})
		}
	}
	return out
}

// txRowIDs returns the ids of every row still to be judged with its holding, and the
// backends of holdings whose COMMIT is in doubt (its client closed the connection, or it
// was terminated, while it ran), whose transaction judgeFence waits to see over before
// it reads the rows. Every other end of a holding is over when the call that reported it
// returned.
func (w *world) txRowIDs() (ids []int64, waits []txWait) {
	for _, h := range w.txHandles() {
		for _, r := range h.t.rows {
			ids = append(ids, r.id)
		}
		if h.state != hLive && h.t.end == txInDoubt {
			waits = append(waits, txWait{int32(h.pid), h.t.releaseStart})
		}
	}
	return ids, waits
}

// trackTxRows takes the rows of the batch's BeginFunc calls on transaction holdings
// whose fn ran into their holdings', to be judged with them (see judgeTxRows).
func (w *world) trackTxRows(ops []*op) {
	for _, o := range ops {
		r := &o.res
		if !o.fenced() || !o.onTxHolding() || r.fnCalls == 0 {
			continue
		}
		if errors.Is(r.err, advisory.ErrLockLost) {
			w.fence.lostInFn++
		}
		t := o.txHolding()
		t.rows = append(t.rows, txRow{id: o.fin.opID, call: fmt.Sprintf("step %d call %d", o.step, o.idx),
			pending: r.err == nil && r.panicked == nil, poison: o.fin.poison, insertPID: r.fence.insertPID, fnBad: r.fnBad})
	}
}

// finalTxRows judges the rows of the holdings the end of the run released.
func (w *world) finalTxRows() []string {
	ids, _ := w.txRowIDs()
	if len(ids) == 0 {
		return nil
	}
	rows, _, err := w.readFence(ids)
	if err != nil {
		return []string{"reading the fencing tables: " + err.Error()}
	}
	return w.judgeTxRows(rows)
}

// judgeTxRows judges every transaction holding's rows against those found committed, and
// forgets the rows of holdings that have ended.
func (w *world) judgeTxRows(rows map[int64]fenceRow) []string {
	var bad []string
	for _, h := range w.txHandles() {
		bad = append(bad, w.judgeHolding(h, rows)...)
		if h.state != hLive {
			h.t.rows = nil
		}
	}
	return bad
}

// judgeHolding judges one holding's rows (see the top of this file).
func (w *world) judgeHolding(h txHandle, rows map[int64]fenceRow) []string {
	var bad []string
	fail := func(r txRow, format string, args ...any) {
		bad = append(bad, fmt.Sprintf("%s, row #%d of BeginFunc (%s): ", h.name, r.id, r.call)+fmt.Sprintf(format, args...))
	}
	ended, endBy := h.state != hLive, h.t.endBy
	if endBy == "" {
		endBy = "a loss"
	}
	commit, doubt := ended && h.t.end == txCommitted, ended && h.t.end == txInDoubt
	pending, seen := 0, 0
	for _, r := range h.t.rows {
		row, present := rows[r.id]
		if r.pending {
			pending++
			if present {
				seen++
			}
		}
		switch {
		case !present && commit && r.pending:
			fail(r, "BeginFunc returned nil and %s returned nil, but the row is not committed", endBy)
		case !present:
		case !r.pending:
			fail(r, "committed, but its BeginFunc failed: its savepoint must have been rolled back")
		case !ended:
			fail(r, "committed while its holding is live: its writes must wait for the holding's Unlock or Close")
		case !commit && !doubt:
			fail(r, "committed, but the holding ended %v (%s): its writes must never commit", h.t.end, endBy)
		default:
			committedTxRow(h, r, row, fail)
		}
	}
	if doubt && seen != 0 && seen != pending {
		bad = append(bad, fmt.Sprintf("%s: %d of its %d pending rows committed (%s): one COMMIT commits all or none",
			h.name, seen, pending, endBy))
	}
	w.countTx(h, pending, seen)
	return bad
}

// committedTxRow checks a pending row that committed with its holding: by the holding's
// backend, holding its keys at COMMIT, fn having seen them held.
func committedTxRow(h txHandle, r txRow, row fenceRow, fail func(txRow, string, ...any)) {
	if row.pid != h.pid || r.insertPID != h.pid {
		fail(r, "committed by pid %d, inserted on pid %d, but the holding's backend is %d", row.pid, r.insertPID, h.pid)
	}
	if !row.held {
		fail(r, "committed, but at COMMIT backend %d did not hold all of its keys", row.pid)
	}
	for _, b := range r.fnBad {
		fail(r, "committed, but during fn: %s", b)
	}
}

// countTx counts, for the statistics, what became of an ended holding's pending rows.
func (w *world) countTx(h txHandle, pending, seen int) {
	if h.state == hLive {
		return
	}
	f := &w.fence
	switch h.t.end {
	case txCommitted:
		f.txCommitted += seen
	case txInDoubt:
		f.txDoubt++
		f.txDoubtRows += seen
	default:
		f.txDropped += pending
	}
}

// txEndOfRelease is how an Unlock's or a Session Close's call o (returning err, after
// which the handle ended) ended the holding's transaction on backend pid of Manager m:
// committed if it returned nil; in doubt if it reported a loss while a termination of
// its backend or a Close of its Manager ran, if its ctx ended while it ran (the COMMIT
// may have been cut, and the connection closed), or if it reported the commit failed or
// unconfirmed; else rolled back.
func (w *world) txEndOfRelease(o *op, pid uint32, m *advisory.Manager) txEnd {
	err := o.res.err
	switch {
	case err == nil:
		return txCommitted
	case errors.Is(err, advisory.ErrNotHeld):
		return txRolledBack // a rival's release ended it: that call says how
	case errors.Is(err, advisory.ErrLockLost):
		if w.disruptedDuring(pid, m, o.res.start, o.res.end) {
			return txInDoubt
		}
		return txRolledBack
	case o.isCtx(err) && o.plan.kind == ctxDone:
		return txRolledBack // nothing was sent: pgx refuses a done ctx
	}
	return txInDoubt // ctx ended during the COMMIT, or the commit failed or is unconfirmed
}

// disruptedDuring reports whether a termination of pid or a Close of m ran at some
// instant between from and to.
func (w *world) disruptedDuring(pid uint32, m *advisory.Manager, from, to time.Time) bool {
	for _, p := range w.batch {
		switch {
		case p.kind == opTerminate && p.res.victim == pid && !p.res.start.After(to) && !p.res.end.Before(from):
			return true
		case p.kind == opClose && p.m == m && !p.res.fence.closeStart.After(to) && !p.res.fence.closedAt.Before(from):
			return true
		}
	}
	return false
}
