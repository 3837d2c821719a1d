package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgadvisory/advisory"
)

// What a transaction holding (a Manager whose Holding() is HoldingTransaction) does
// differently, as the judge expects it: how an Unlock or a Session's Close ends the
// holding's transaction (its rows are judged in fence_pending.go), a Session's Unlock of
// a lock held once, BeginTxFunc with options, and the backend idle in transaction.

// holdingOf is the transaction state of a new Lock or Session of m.
func holdingOf(m *advisory.Manager) txHolding {
	return txHolding{tx: m.Holding() == advisory.HoldingTransaction}
}

// releasedAnyway reports whether the call's error is one an Unlock or a Session's Close
// of a transaction holding may return after BeginFunc left writes pending: the lock is
// released, but the COMMIT failed or is unconfirmed (neither a loss nor ErrNotHeld).
func (v *verdict) releasedAnyway(t *txHolding) bool {
	err := v.o.res.err
	return t.tx && t.pending() && err != nil && !errors.Is(err, advisory.ErrNotHeld) &&
		!errors.Is(err, advisory.ErrLockLost) && !v.o.isCtx(err)
}

// endTx records how an Unlock or a Session's Close that ended the handle (ended) ended
// its transaction, if it held by transaction.
func (v *verdict) endTx(t *txHolding, ended bool, pid uint32, m *advisory.Manager) {
	if !t.tx || !ended {
		return
	}
	o := v.o
	end := v.w.txEndOfRelease(o, pid, m)
	if t.poisoned() && end != txCommitted {
		end = txRolledBack // a pending row fails the COMMIT: nothing of it commits
		v.w.fence.txPoisoned++
	}
	t.ended(end, fmt.Sprintf("step %d call %d, %v → %s", o.step, o.idx, o, o.outcome()))
	if t.end == txInDoubt && t.releaseStart.IsZero() {
		t.releaseStart = o.res.start
	}
}

// txSessionUnlock judges a Session's Unlock on a transaction holding, which releases
// nothing: of a lock held once it returns ErrTransactionHolding and keeps it, counted
// once; of one held more often it counts down. It reports whether it judged the result.
func (v *verdict) txSessionUnlock() bool {
	o, r, h := v.o, &v.o.res, v.o.sh
	name := o.names[0]
	switch {
	case !h.tx:
		return false
	case errors.Is(r.err, advisory.ErrTransactionHolding):
		if h.held[name] == 0 || (o.isolated && o.preHeld != 1) {
			v.fail("ErrTransactionHolding, but the Session held %s %d times (now %d): %v", name, o.preHeld, h.held[name], r.err)
		}
		return true
	case r.err == nil && h.held[name] < 2:
		v.fail("returned nil, but the Session held %s %d times (before the batch %d): a transaction holding "+
			"cannot release a lock held once", name, h.held[name], o.preHeld)
		return true
	}
	return false
}

// optsRefused judges Lock.BeginTxFunc and Session.BeginTxFunc with transaction options
// on a transaction holding: fn never runs, the error wraps ErrTransactionHolding (or is
// what would have kept any call from running: ctx, a loss, a rival's release), and the
// target is kept (heldAfter).
func (v *verdict) optsRefused() {
	o, r := v.o, &v.o.res
	if r.fnCalls > 0 {
		v.fail("fn ran %d times, with transaction options, on a transaction holding", r.fnCalls)
	}
	switch err := r.err; {
	case errors.Is(err, advisory.ErrTransactionHolding):
		v.w.fence.txRefused++
	case o.isCtx(err), v.lossOK && errors.Is(err, advisory.ErrLockLost), v.closed && errors.Is(err, advisory.ErrClosed),
		o.rivalClose && errors.Is(err, advisory.ErrNotHeld):
	default:
		v.fail("with transaction options on a transaction holding: got %v, want an error wrapping ErrTransactionHolding", err)
	}
}

// txIdle checks that the backend of every live transaction holding is idle in its
// transaction, as pg_stat_activity shows it.
func (w *world) txIdle() []string {
	var pids []int32
	who := map[uint32]string{}
	for _, h := range w.liveLocks() {
		if h.tx && h.l.Err() == nil {
			pids, who[h.pid] = append(pids, int32(h.pid)), h.String()
		}
	}
	for _, h := range w.liveSessions() {
		if h.tx && h.S.Err() == nil {
			pids, who[h.pid] = append(pids, int32(h.pid)), h.String()
		}
	}
	if len(pids) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows, err := w.admin.Query(ctx, "SELECT pid, coalesce(state, '') FROM pg_stat_activity WHERE pid = ANY($1)", pids)
	if err != nil {
		return []string{"reading pg_stat_activity: " + err.Error()}
	}
	defer rows.Close()
	var bad []string
	for rows.Next() {
		var pid uint32
		var state string
		if err := rows.Scan(&pid, &state); err != nil {
			return []string{"reading pg_stat_activity: " + err.Error()}
		}
		if state != "idle in transaction" {
			bad = append(bad, fmt.Sprintf("%s holds by transaction, but its backend is %q, not idle in transaction", who[pid], state))
		}
	}
	return append(bad, rowsErr(rows.Err())...)
}

func rowsErr(err error) []string {
	if err != nil {
		return []string{"reading pg_stat_activity: " + err.Error()}
	}
	return nil
}
