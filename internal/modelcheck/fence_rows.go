package modelcheck

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/pgadvisory/advisory"
)

// After a batch has settled: the fenced calls' rows and the tokens in the fencing table,
// against the calls' results.

// fenceState is the model's view of the fencing tables, and what it counted.
type fenceState struct {
	nextOp    int64            // the last row id handed out
	tokens    map[string]int64 // short name → the key's newest token (the table, after the last batch)
	committed int              // rows found committed
	absent    int              // fenced calls whose fn ran and whose row is not committed
	inDoubt   int              // calls that reported a loss although their row committed
	ctxLoss   int              // fenced calls and Tokens that lost the lock because their ctx ended
	fresh     int              // tokens taken
	lostInFn  int              // fenced calls whose fn ran and that reported a loss
	// ctxLossSeen: the first few of the ctxLoss calls, for the log.
	ctxLossSeen []string
	// Transaction holdings (fence_pending.go): pending rows committed at Unlock or Close,
	// pending rows dropped with a lost holding, holdings whose COMMIT was in doubt and the
	// rows they committed, releases whose COMMIT a poisoned row failed, BeginTxFunc calls
	// with options refused.
	txCommitted, txDropped, txDoubt, txDoubtRows, txPoisoned, txRefused int
}

func (f *fenceState) stats() string {
	return fmt.Sprintf("fenced rows: %d committed, %d absent; lost after fn began: %d; in-doubt commits (loss reported, row committed): %d; "+
		"losses from an ended ctx: %d %q; tokens taken: %d%s", f.committed, f.absent, f.lostInFn, f.inDoubt, f.ctxLoss, f.ctxLossSeen, f.fresh, f.txStats())
}

// setupFence creates the row table and the fencing table, empty.
func (w *world) setupFence() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w.fence.tokens = map[string]int64{}
	if _, err := w.admin.Exec(ctx, "DROP TABLE IF EXISTS "+modelWrites+", "+modelFenceTable+"; "+witnessSQL); err != nil {
		w.t.Fatalf("create %s: %v", modelWrites, err)
	}
	if err := w.slots[0].m.CreateFenceTable(ctx); err != nil {
		w.t.Fatalf("CreateFenceTable: %v", err)
	}
}

// witnessSQL creates the rows' table. A deferred constraint trigger runs inside COMMIT,
// after fn: it records whether the committing backend then held every key of the row, so
// a committed row says whether it committed under its locks (nothing can release a
// session-level lock between the trigger and the commit record but the session's end,
// which aborts the commit).
const witnessSQL = `CREATE TABLE ` + modelWrites + ` (op bigint PRIMARY KEY, pid int NOT NULL, keys bigint[] NOT NULL,
	held_at_commit boolean, poison boolean NOT NULL);
CREATE OR REPLACE FUNCTION model_witness() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	UPDATE ` + modelWrites + ` SET held_at_commit = (SELECT count(DISTINCT l.classid::bigint << 32 | l.objid::bigint)
		FROM pg_locks l WHERE l.locktype = 'advisory' AND l.objsubid = 1 AND l.granted AND l.pid = pg_backend_pid()
		  AND (l.classid::bigint << 32 | l.objid::bigint) = ANY (NEW.keys)) = cardinality(NEW.keys)
	WHERE op = NEW.op;
	RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER model_witness AFTER INSERT ON ` + modelWrites + `
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION model_witness();
CREATE OR REPLACE FUNCTION model_poison() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
	RAISE EXCEPTION 'model: row % is poisoned: its transaction must not commit', NEW.op;
END $$;
CREATE CONSTRAINT TRIGGER model_poison AFTER INSERT ON ` + modelWrites + `
	DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.poison) EXECUTE FUNCTION model_poison()`

// judgeFence checks the batch's rows and tokens against its results, and updates the
// model's tokens.
func (w *world) judgeFence(ops []*op) []string {
	ids, waits := w.txRowIDs()
	var gone []int32
	for _, o := range ops {
		if !o.fenced() || o.onTxHolding() || o.res.fnCalls == 0 {
			continue
		}
		ids = append(ids, o.fin.opID)
		switch {
		case !errors.Is(o.res.err, advisory.ErrLockLost) || o.res.fence.insertPID == 0:
		case o.kind == opDoTx && o.m.Holding() == advisory.HoldingTransaction: // see txWait
			waits = append(waits, txWait{int32(o.res.fence.insertPID), o.res.fence.fnStart})
		default:
			gone = append(gone, int32(o.res.fence.insertPID))
		}
	}
	// A backend whose client saw the connection fail may still be finishing its COMMIT.
	if bad := w.waitGone(gone) + w.waitTxOver(waits); bad != "" {
		return []string{bad}
	}
	rows, tokens, err := w.readFence(ids)
	if err != nil {
		return []string{"reading the fencing tables: " + err.Error()}
	}
	var bad []string
	for _, o := range ops {
		row, present := rows[o.fin.opID]
		if o.fenced() && !o.onTxHolding() {
			bad = append(bad, w.judgeRow(o, row, present)...)
		}
	}
	bad = append(bad, w.judgeTxRows(rows)...)
	bad = append(bad, w.judgeTokens(ops, tokens)...)
	for _, n := range w.names {
		w.fence.tokens[n] = tokens[w.key(n)]
	}
	return bad
}

// fenceRow is a committed row: the backend it was inserted on, and whether that backend
// held the row's keys at COMMIT (see witnessSQL).
type fenceRow struct {
	pid  uint32
	held bool
}

func (w *world) readFence(ids []int64) (map[int64]fenceRow, map[advisory.Key]int64, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rows := map[int64]fenceRow{}
	res, err := w.admin.Query(ctx, "SELECT op, pid, coalesce(held_at_commit, false) FROM "+modelWrites+" WHERE op = ANY($1)", ids)
	if err != nil {
		return nil, nil, err
	}
	for res.Next() {
		var id int64
		var row fenceRow
		if err := res.Scan(&id, &row.pid, &row.held); err != nil {
			return nil, nil, err
		}
		rows[id] = row
	}
	if err := res.Err(); err != nil {
		return nil, nil, err
	}
	tokens := map[advisory.Key]int64{}
	res, err = w.admin.Query(ctx, "SELECT key, pair, token FROM "+modelFenceTable)
	if err != nil {
		return nil, nil, err
	}
	for res.Next() {
		var key, tok int64
		var pair bool
		if err := res.Scan(&key, &pair, &tok); err != nil {
			return nil, nil, err
		}
		if pair { // the model takes no pair locks: Token of a name's lock wrote a pair's row
			return nil, nil, fmt.Errorf("the fencing table has a pair's row (%d, token %d), but no pair lock took a token", key, tok)
		}
		tokens[advisory.Key(key)] = tok
	}
	return rows, tokens, res.Err()
}

// judgeRow: a call that returned nil committed its row, on its lock's backend; a call
// whose fn failed or panicked, or whose ctx ended, did not; a call that reported a loss
// did not, unless a termination or Close of its backend overlapped the commit (in doubt).
// A committed row's backend held the keys during fn, and was not terminated (nor its
// Manager closed) before fn began.
func (w *world) judgeRow(o *op, row fenceRow, present bool) []string {
	r, pid := &o.res, row.pid
	var bad []string
	fail := func(format string, args ...any) {
		bad = append(bad, fmt.Sprintf("call %d, %v: ", o.idx, o)+fmt.Sprintf(format, args...))
	}
	ok := r.panicked == nil && r.err == nil
	if r.fnCalls > 0 && errors.Is(r.err, advisory.ErrLockLost) {
		w.fence.lostInFn++
	}
	switch {
	case ok && !present:
		fail("returned nil, but its row #%d is not committed", o.fin.opID)
	case !present:
		if r.fnCalls > 0 {
			w.fence.absent++
		}
		return bad
	case r.fnCalls == 0:
		fail("fn never ran, but row #%d is committed", o.fin.opID)
	case ok:
	case errors.Is(r.err, advisory.ErrLockLost) && !errors.Is(r.err, errModelFn) && w.overlapsCommit(o, pid):
		w.fence.inDoubt++
	default:
		fail("row #%d is committed, but the call returned %v (panic %v)", o.fin.opID, r.err, r.panicked)
	}
	w.fence.committed++
	if pid != r.fence.insertPID {
		fail("row #%d is committed by pid %d, but fn ran on pid %d", o.fin.opID, pid, r.fence.insertPID)
	}
	if (o.lh != nil && pid != o.lh.pid) || (o.sh != nil && pid != o.sh.pid) {
		fail("row #%d is committed by pid %d, not by its lock's backend", o.fin.opID, pid)
	}
	if !row.held {
		fail("row #%d committed, but at COMMIT its backend %d did not hold all of %v", o.fin.opID, pid, o.fin.witness)
	}
	for _, b := range r.fnBad {
		fail("row #%d is committed, but during fn: %s", o.fin.opID, b)
	}
	if o.pre == hLost {
		fail("row #%d is committed on a Lock lost before the call", o.fin.opID)
	}
	for _, p := range w.batch {
		if p.kind == opTerminate && p.res.victim == pid && p.res.end.Before(r.fence.fnStart) {
			fail("row #%d is committed, but its backend %d was terminated before fn began", o.fin.opID, pid)
		}
		if p.kind == opClose && p.m == o.target() && p.res.fence.closedAt.Before(r.fence.fnStart) {
			fail("row #%d is committed, but its Manager was closed before fn began", o.fin.opID)
		}
	}
	return bad
}

// target returns the Manager whose connection the fenced call ran on.
func (o *op) target() *advisory.Manager {
	switch {
	case o.lh != nil:
		return o.lh.m
	case o.sh != nil:
		return o.sh.m
	}
	return o.m
}

// overlapsCommit reports whether a termination of pid or a Close of the call's Manager
// ran while the call committed (between fn's return and the call's).
func (w *world) overlapsCommit(o *op, pid uint32) bool {
	return w.disruptedDuring(pid, o.target(), o.res.fence.fnEnd, o.res.end)
}

// judgeTokens: a token Token took is at most the key's newest in the table, and no two
// Locks got the same one; a cancelled Token that ran alone on its key took none.
func (w *world) judgeTokens(ops []*op, tokens map[advisory.Key]int64) []string {
	var bad []string
	got := map[string]map[int64]*lockH{}
	for _, o := range ops {
		if o.kind != opToken || o.pre != hLive || o.fin.cached != 0 {
			continue
		}
		r, name := &o.res, o.names[0]
		post := tokens[w.key(name)]
		switch {
		case r.err == nil:
			if r.fence.token > post {
				bad = append(bad, fmt.Sprintf("call %d, %v: returned %d, but the table's newest token of %s is %d", o.idx, o, r.fence.token, name, post))
			}
			if got[name] == nil {
				got[name] = map[int64]*lockH{}
			}
			switch h := got[name][r.fence.token]; {
			case h == nil:
				got[name][r.fence.token] = o.lh
				w.fence.fresh++
			case h != o.lh:
				bad = append(bad, fmt.Sprintf("call %d, %v: token %d was returned to %v too", o.idx, o, r.fence.token, h))
			}
		case o.isolated && o.isCtx(r.err) && post != o.fin.pre:
			bad = append(bad, fmt.Sprintf("call %d, %v: returned %v, but the newest token of %s went from %d to %d",
				o.idx, o, r.err, name, o.fin.pre, post))
		}
	}
	return bad
}
