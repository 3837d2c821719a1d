package advisory

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// Waits in slices. A connection waiting in pg_advisory_lock sends nothing and receives
// nothing for as long as the wait lasts, which is all an idle reaper in the path (a proxy's
// or a load balancer's idle timeout, HAProxy's "timeout client") needs to cut it. So
// with WithHeartbeat(d) the rule is that every connection the Manager keeps open speaks at
// least every d: a held one beats (pin_heartbeat.go), a waiting one waits in slices of d.
// Each slice is the lock statement under lock_timeout = d, set for the slice's own
// transaction only; a slice that ends without the grant (55P03) leaves nothing held and
// the next begins at once. Between two slices the wait has left the server's queue: it
// joins it again at its end (docs/locking.md says what that costs).

// sliced reports the slice of the Manager's waits: its heartbeat, or 0 (one wait).
func (p *pin) sliced() time.Duration { return p.m.set.heartbeat }

// isSliceEnd reports the end of a slice without the grant: lock_timeout (55P03).
func isSliceEnd(err error) bool { return sqlState(err) == "55P03" }

// wait runs the pin's lock statement as a lock wait (see lease.take), in slices while the
// Manager has a heartbeat, until the lock is granted, ctx ends, or a slice fails for
// another reason. A transaction holding's slice that ended is rolled back first. A wait
// is watched like a holding: a slice the server has not ended beatTimeout after its
// lock_timeout (a frozen server; behind a proxy, one cut off from it) is interrupted as
// ctx would interrupt it (a CancelRequest, then the connection's fallback deadline), and
// the wait fails with a silentWait, which no caller takes for a usable connection (see
// usable): the connection is closed, so a server that comes back never grants the lock to
// a session nobody waits on (it fails to send the grant, and ends the session).
func (p *pin) wait(ctx context.Context) (uint32, *bool, error) {
	for {
		slice := p.watchSlice()
		pid, got, err := p.lease.take(p, ctx, false)
		if p.endSlice(slice) && ctx.Err() == nil {
			return pid, got, &silentWait{slice: p.sliced(), err: err}
		}
		if p.sliced() == 0 || !isSliceEnd(err) || ctx.Err() != nil {
			return pid, got, err
		}
		if p.pg.TxStatus() != 'I' {
			if cerr := p.lease.clear(p, false); cerr != nil {
				return pid, got, cerr
			}
		}
	}
}

// unlockWatched is unlock, watched with a heartbeat as a wait's slice is (see watchSlice):
// a release the server has not answered within the heartbeat and beatTimeout (a frozen
// server behind a proxy) is interrupted and fails with a silentWait, after which the
// connection is closed (see unlockFailure: the release was not confirmed, so the lock is
// reported lost). Only with a heartbeat (pin.release): without one, ctx alone bounds it.
func (p *pin) unlockWatched(ctx context.Context, keep bool) error {
	slice := p.watchSlice()
	err := p.unlock(ctx, keep)
	if p.endSlice(slice) {
		p.cancel.Settle() // the interrupt's CancelRequests end before the connection does
		if ctx.Err() == nil {
			err = &silentWait{slice: p.sliced(), op: "release", err: err}
		}
	}
	return err
}

// takeKeysWatched is lease.takeKeys, a wait's slice watched as wait watches a Lock's: a
// slice the server has not ended beatTimeout after its lock_timeout fails with a
// silentWait, which leaves the connection to be closed (see usable). A try is watched
// with the same bound (the heartbeat and beatTimeout), as a Lock's TryLock is (see
// pin.tryLock).
func (p *pin) takeKeysWatched(ctx context.Context, ts []target, try bool) (uint32, *bool, []int64, error) {
	slice := p.watchSlice()
	pid, owned, busy, err := p.lease.takeKeys(p, ctx, ts, try)
	if p.endSlice(slice) && ctx.Err() == nil {
		err = &silentWait{slice: p.sliced(), op: tryOp(try), err: err}
	}
	return pid, owned, busy, err
}

// tryWatched is lease.take of a try, watched with a heartbeat as a wait's slice is: a
// try the server has not answered within the heartbeat and beatTimeout fails with a
// silentWait, which leaves the connection to be closed (see pin.tryLock).
func (p *pin) tryWatched(ctx context.Context) (uint32, *bool, error) {
	slice := p.watchSlice()
	pid, got, err := p.lease.take(p, ctx, true)
	if p.endSlice(slice) && ctx.Err() == nil {
		err = &silentWait{slice: p.sliced(), op: "try", err: err}
	}
	return pid, got, err
}

// tryOp is silentWait's op for a take: "try" for a try, "" for a wait's slice.
func tryOp(try bool) string {
	if try {
		return "try"
	}
	return ""
}

// watchSlice puts the slice about to run under the Manager's sliceWatch, bounded by the
// slice and beatTimeout, as a beat is: past that, its statement is interrupted through
// the connection's cancel handler, as the end of ctx would interrupt it. The slice runs
// under the caller's ctx itself: a context of its own (a child to cancel) cost the
// Lock behind a pooler about a quarter of its allocations, and pgx a watch of it (issue
// 47). Without a heartbeat there is no slice to watch (nil). Pass the result to endSlice
// once the statement has returned.
func (p *pin) watchSlice() *sliceEntry {
	if d := p.sliced(); d > 0 {
		return p.m.slices.start(d+beatTimeout, p.cancel)
	}
	return nil
}

// endSlice ends the watch of a slice (see watchSlice), and reports whether its statement
// was interrupted.
func (p *pin) endSlice(e *sliceEntry) (interrupted bool) {
	if e == nil {
		return false
	}
	return p.m.slices.end(e)
}

// sliceWatch bounds the slices of a Manager's waits with one timer for all of them, not a
// timer (or a context.WithTimeout) per Lock: setting a timer can wake an idle thread, and
// most slices end, granted, within a millisecond (issue 47). Every slice of a Manager has
// the same bound, so the slices in start order are in deadline order: the timer is set
// for the oldest, a slice started while it is set touches nothing, and when it fires it
// interrupts the slices past their deadline and is set again for the oldest still
// running, if any. A slice that ended leaves its entry behind, dropped at the next start,
// end or firing that finds it first. The zero value is ready.
type sliceWatch struct {
	mu     sync.Mutex
	queue  []*sliceEntry // running slices (and ended ones not yet dropped), oldest first
	timer  *time.Timer   // made at the first slice
	set    bool
	closed bool
}

// interrupter stops the statement running on a connection: its cancel handler's
// Interrupt (a CancelRequest, then a fallback deadline; see cancelreq.Handler), which the
// connection's owner settles once the statement has returned.
type interrupter interface{ Interrupt() }

// sliceEntry is one slice of a wait: its deadline, and its connection's interrupter.
// ended and interrupted are set under the sliceWatch's mutex.
type sliceEntry struct {
	deadline    time.Time
	conn        interrupter
	ended       bool
	interrupted bool
}

// start watches a slice that must end within bound, whose statement runs on conn. Pass
// the entry to end once the statement has returned.
func (w *sliceWatch) start(bound time.Duration, conn interrupter) *sliceEntry {
	e := &sliceEntry{deadline: time.Now().Add(bound), conn: conn}
	w.mu.Lock()
	w.drop()
	w.queue = append(w.queue, e)
	switch {
	case w.set || w.closed:
	case w.timer == nil:
		w.timer, w.set = time.AfterFunc(bound, w.fire), true
	default:
		w.timer.Reset(bound)
		w.set = true
	}
	w.mu.Unlock()
	return e
}

// end ends the watch of e (see start), and reports whether its statement was
// interrupted. After end, e's connection is never interrupted for it.
func (w *sliceWatch) end(e *sliceEntry) (interrupted bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	e.ended = true
	w.drop()
	return e.interrupted
}

// drop removes the ended slices at the head of the queue. The caller holds w.mu.
func (w *sliceWatch) drop() {
	for len(w.queue) > 0 && w.queue[0].ended {
		w.queue[0] = nil
		w.queue = w.queue[1:]
	}
}

// fire is the timer's: it interrupts the slices past their deadline, and sets the timer
// again for the oldest still running. It interrupts under the mutex, which a slice's
// end takes too: a slice whose end has run is never interrupted (the interrupt would
// strike its connection's next statement), and one interrupted says so at its end.
// Interrupt does not block.
func (w *sliceWatch) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.set = false
	now := time.Now()
	for len(w.queue) > 0 {
		e := w.queue[0]
		if !e.ended && e.deadline.After(now) {
			if !w.closed {
				w.timer.Reset(e.deadline.Sub(now))
				w.set = true
			}
			break
		}
		if !e.ended {
			e.interrupted = true
			e.conn.Interrupt() // as ctx's end would interrupt the slice's statement (see pin.wait)
		}
		w.queue[0] = nil
		w.queue = w.queue[1:]
	}
}

// stop stops the timer (Manager.Close, after every call returned).
func (w *sliceWatch) stop() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.closed = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// silentWait is the error of a statement watched as a wait's slice is (see watchSlice)
// that got no answer within its bound: a wait's slice beatTimeout after its lock_timeout,
// a try (op "try") or a release (op "release") within the heartbeat and beatTimeout.
// The server stopped answering (frozen, or cut off from a proxy in the path). It does not
// wrap the statement's own error, whose deadline is the library's, not the caller's ctx.
// It is always wrapped in the call's error, which says "advisory:".
type silentWait struct {
	slice time.Duration
	op    string // "" for a wait's slice
	err   error
}

func (e *silentWait) Error() string {
	if e.op != "" {
		return fmt.Sprintf("the server did not answer the %s within %v (the heartbeat's %v and %v more): it "+
			"stopped answering (frozen, or cut off from a proxy in the path; or a pooler in the path kept "+
			"the statement queued); the %s was abandoned (%v)", e.op, e.slice+beatTimeout, e.slice, beatTimeout, e.op, e.err)
	}
	return fmt.Sprintf("the server did not end a wait slice (lock_timeout %v) within %v more: it "+
		"stopped answering (frozen, or cut off from a proxy in the path); the wait was abandoned (%v)",
		e.slice, beatTimeout, e.err)
}

// sliceMillis is lock_timeout's value for a slice.
func sliceMillis(d time.Duration) string { return strconv.FormatInt(d.Milliseconds(), 10) + "ms" }

// sliceText turns sql, a session holding's lock statement ($1 the key, $2 the connection's
// token where it is checked), into a simple-protocol Query that waits at most slice: a
// set_config of lock_timeout first, local to the Query's own implicit transaction, and
// the arguments written in (key, the key's literal: a bigint or a bigint[]). A name's
// comment stays first (see Holders).
func sliceText(sql, key, token string, slice time.Duration) string {
	head := ""
	if strings.HasPrefix(sql, commentPrefix) {
		head = leadingComment(sql)
		sql = sql[len(head):]
	}
	sql = strings.ReplaceAll(sql, "$2", "'"+token+"'") // hex: no quoting needed (see newToken)
	sql = strings.ReplaceAll(sql, "$1", key)
	return head + "SELECT pg_catalog.set_config('lock_timeout', '" + sliceMillis(slice) + "', true); " + sql
}

// sliceRow runs a sliceText Query and returns its lock statement's row as pin.row does:
// (pid, result) where the statement is checked, (result) on a direct connection.
func (p *pin) sliceRow(ctx context.Context, sql string) (uint32, *bool, error) {
	p.rowPID, p.rowOK = p.pid, pgtype.Bool{}
	err := lastRow(p.pg.Exec(ctx, sql), func(v [][]byte) error {
		switch len(v) {
		case 1:
		case 2:
			n, err := strconv.ParseUint(string(v[0]), 10, 32)
			if err != nil {
				return err
			}
			p.rowPID = uint32(n)
		default:
			return errNotOneRow
		}
		b := v[len(v)-1]
		p.rowOK = pgtype.Bool{Bool: string(b) == "t", Valid: len(b) > 0}
		return nil
	})
	if !p.rowOK.Valid {
		return p.rowPID, nil, err
	}
	return p.rowPID, &p.rowOK.Bool, err
}

// txSliceText turns a transaction Session's take (its last statement the lock) into one
// that waits at most slice: lock_timeout set for the slice before it. It stays set in the
// Session's transaction after the take: only takes wait on locks there, each setting its
// own, and fn's savepoint clears it (see beginFn). A plain transaction holding's lock
// statement has the slice in its BEGIN's settings (see txSettings).
func txSliceText(sql string, slice time.Duration) string {
	i := strings.LastIndex(sql, lockRowStart)
	return sql[:i] + "SET LOCAL lock_timeout = '" + sliceMillis(slice) + "'; " + sql[i:]
}

// takeSlice is a slice of a session holding's Session.Lock or LockAll of ts: one key by
// its own statement, several in one, as takeKeys runs them, each under the slice's
// lock_timeout. It returns (pid, whether it ran on the connection's own backend).
func (p *pin) takeSlice(ctx context.Context, ts []target) (uint32, *bool, error) {
	d := p.sliced()
	if len(ts) == 1 {
		st := p.m.texts.statements(p.m.activityName(ts[0].name), false, false, p.st.direct)
		return p.sliceRow(ctx, sliceText(st.lock, keyLiteral(ts[0].key), p.token, d))
	}
	keys := make([]string, len(ts))
	for i, t := range ts {
		keys[i] = strconv.FormatInt(int64(t.key), 10)
	}
	sql := sliceText(lockAllSQL, "'{"+strings.Join(keys, ",")+"}'::bigint[]", p.token, d)
	var pid uint32
	var owned bool
	err := lastRow(p.pg.Exec(ctx, sql), func(v [][]byte) error {
		if len(v) != 3 {
			return errNotOneRow
		}
		n, err := strconv.ParseUint(string(v[0]), 10, 32)
		pid, owned = uint32(n), string(v[1]) == "t"
		return err
	})
	return pid, &owned, err
}
