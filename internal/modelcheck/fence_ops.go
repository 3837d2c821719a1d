package modelcheck

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
)

// The fencing calls of the model: Lock.BeginFunc, Session.BeginFunc and Manager.DoTx run a
// transaction that inserts one row, keyed by the call's unique op id, with
// pg_backend_pid(), into modelWrites; Lock.Token takes tokens in modelFenceTable;
// CheckToken checks a token the model chose in a transaction of the admin pool.

const (
	modelFenceTable = "model_fence"  // the Managers' WithFenceTable
	modelWrites     = "model_writes" // the fenced transactions' rows
)

// tokKind is which token CheckToken is given.
type tokKind int

const (
	tokCurrent tokKind = iota // the newest token of the key, as the model knew it
	tokStale                  // an older one: always refused
	tokNever                  // one no holder has taken yet
)

// fenceInput is what the generator drew for a fencing call.
type fenceInput struct {
	opID  int64   // the row's id (fenced transactions)
	token int64   // CheckToken
	tok   tokKind // CheckToken
	pre   int64   // CheckToken, Token: the key's newest token before the batch
	// pair: CheckToken is CheckTokenPair, of the pair of the same 64 bits as the name's
	// key: a counter of its own, where the model never takes a token.
	pair bool
	// cached: Token: the Lock's token taken in an earlier step, or 0.
	cached int64
	// witness: the names whose keys the row's backend must hold at COMMIT: the Lock's;
	// a Session's held names if no other call of the batch may change them, else none.
	witness []string
	// prefer: opTerminate: the backend of the batch's first call, if it is a fenced call
	// on a live Lock or Session, so that the termination lands during its fn.
	prefer uint32
	// poison: the row fails its transaction's COMMIT (a deferred trigger raises): drawn
	// for the fenced calls of transaction holdings only, whose BeginFunc returns before
	// the COMMIT, so that the Unlock, the Session's Close or DoTx meets the failure.
	poison bool
}

// fenceResult is what a fencing call did, beyond op.res.
type fenceResult struct {
	token      int64     // Token's result
	fnStart    time.Time // fn began
	fnEnd      time.Time // fn returned (or panicked)
	insertPID  uint32    // the backend the row was inserted on (0: the insert failed)
	insertErr  error     // the insert's error
	closeStart time.Time // opClose: Manager.Close called
	closedAt   time.Time // opClose: Manager.Close returned
}

func (f fenceResult) String() string {
	if f.token != 0 {
		return fmt.Sprintf(" token %d", f.token)
	}
	return ""
}

func (o *op) fenced() bool { return o.kind == opBegin || o.kind == opSBegin || o.kind == opDoTx }

var fnNames = [...]string{"nil", "err", "panic", "wait"}

func (o *op) fenceString() string {
	fn := fnNames[o.fn]
	if o.fn == fnWait {
		fn += " " + o.fnWait.String()
	}
	if o.fin.poison {
		fn += ", row poisoned"
	}
	var call string
	begin := "BeginFunc("
	if o.txOpts {
		begin = "BeginTxFunc(repeatable read, "
	}
	switch o.kind {
	case opBegin:
		call = fmt.Sprintf("%v[%v].%s#%d, fn=%s)", o.lh, o.pre, begin, o.fin.opID, fn)
	case opSBegin:
		call = fmt.Sprintf("%v[%v].%s#%d, fn=%s) holding %v", o.sh, o.pre, begin, o.fin.opID, fn, o.names)
	case opDoTx:
		call = fmt.Sprintf("%s.DoTx(%s, #%d, fn=%s)", o.slot, o.names[0], o.fin.opID, fn)
	case opToken:
		call = fmt.Sprintf("%v[%v].Token (cached %d, newest %d)", o.lh, o.pre, o.fin.cached, o.fin.pre)
	case opCheckToken:
		method := "CheckToken"
		if o.fin.pair {
			method = "CheckTokenPair"
		}
		call = fmt.Sprintf("%s.%s(%s, %d %s; newest %d)", o.slot, method, o.names[0], o.fin.token,
			[...]string{"current", "stale", "never taken"}[o.fin.tok], o.fin.pre)
	}
	return call
}

// genFn draws fn and the row id of a fenced call, and remembers Token's cached token.
func (w *world) genFn(o *op) {
	switch {
	case o.kind == opToken:
		o.fin.cached, o.fin.pre = o.lh.token, w.fence.tokens[o.lh.name]
	case o.fenced():
		o.fn = fnKind(w.pickWeighted([]int{30, 25, 20, 25}))
		o.fnWait = time.Duration(w.rng.IntN(80)) * time.Millisecond
		w.fence.nextOp++
		o.fin.opID = w.fence.nextOp
		// On a transaction holding, BeginTxFunc with options now and then (refused), and
		// rows that fail the COMMIT. Drawn there only, so that runs of session holdings
		// draw as they always did.
		if o.onTxHolding() || (o.kind == opDoTx && o.m.Holding() == advisory.HoldingTransaction) {
			o.txOpts = o.kind != opDoTx && w.rng.IntN(6) == 0
			o.fin.poison = w.rng.IntN(8) == 0
		}
	}
}

func preferVictim(focus *op) uint32 {
	switch {
	case focus == nil || !focus.fenced() || focus.pre != hLive:
	case focus.lh != nil:
		return focus.lh.pid
	case focus.sh != nil:
		return focus.sh.pid
	}
	return 0
}

// witnessOf returns the names a fenced call's backend must hold from fn to COMMIT.
func witnessOf(o *op, batch []*op) []string {
	if o.kind == opSBegin {
		for _, p := range batch {
			if p != o && p.sh == o.sh {
				return nil // it may lock or unlock before the transaction
			}
		}
	}
	return o.full
}

// genCheckToken draws the name and the token CheckToken checks.
func (w *world) genCheckToken(o *op, focus *op) {
	s := w.slots[w.rng.IntN(len(w.slots))]
	o.slot, o.m, o.app = s.String(), s.m, s.app
	o.names = []string{w.pickName(focus)}
	cur := w.fence.tokens[o.names[0]]
	o.fin.pre, o.fin.pair = cur, w.rng.IntN(4) == 0
	switch r := w.rng.IntN(3); {
	case r == 0 && cur > 1:
		o.fin.tok, o.fin.token = tokStale, 1+w.rng.Int64N(cur-1)
	case r == 1 || cur == 0:
		o.fin.tok, o.fin.token = tokNever, cur+1
	default:
		o.fin.tok, o.fin.token = tokCurrent, cur
	}
}

func (o *op) fenceCall(ctx context.Context) {
	r := &o.res
	switch o.kind {
	case opBegin:
		r.err = o.lh.l.BeginTxFunc(ctx, o.txOptions(), func(tx pgx.Tx) error { return o.txBody(ctx, tx) })
	case opSBegin:
		r.err = o.sh.S.BeginTxFunc(ctx, o.txOptions(), func(tx pgx.Tx) error { return o.txBody(ctx, tx) })
	case opDoTx:
		r.err = o.m.DoTx(ctx, o.full[0], o.txBody)
	case opToken:
		r.fence.token, r.err = o.lh.l.Token(ctx)
	case opCheckToken:
		r.err = o.checkToken(ctx)
	}
}

// txOptions are the options of a BeginTxFunc: none, as BeginFunc's, unless txOpts.
func (o *op) txOptions() pgx.TxOptions {
	if o.txOpts {
		return pgx.TxOptions{IsoLevel: pgx.RepeatableRead}
	}
	return pgx.TxOptions{}
}

// txBody is fn of the fenced calls: it inserts the call's row, asks the server whether its
// backend holds the keys that fence it, then does what o.fn says.
func (o *op) txBody(ctx context.Context, tx pgx.Tx) error {
	r := &o.res
	r.fnCalls++
	r.fence.fnStart = time.Now()
	defer func() { r.fence.fnEnd = time.Now() }()
	keys := []int64{}
	for _, k := range o.fin.witness {
		keys = append(keys, int64(advisory.KeyOf(k)))
	}
	err := tx.QueryRow(ctx, "INSERT INTO "+modelWrites+" (op, pid, keys, poison) VALUES ($1, pg_backend_pid(), $2, $3) RETURNING pid",
		o.fin.opID, keys, o.fin.poison).Scan(&r.fence.insertPID)
	if err != nil {
		r.fence.insertErr = err
		return err
	}
	r.fnPIDs = append(r.fnPIDs, r.fence.insertPID)
	for _, k := range keys {
		held, err := holdsKey(o.admin, r.fence.insertPID, advisory.Key(k))
		switch {
		case err != nil:
			r.fnBad = append(r.fnBad, fmt.Sprintf("fn could not read pg_locks: %v", err))
		case !held:
			r.fnBad = append(r.fnBad, fmt.Sprintf("fn ran on pid %d, but pg_locks shows no hold of %v by it", r.fence.insertPID, k))
		}
	}
	return o.fnOutcome(ctx)
}

// checkToken runs CheckToken in a transaction of the admin pool, and rolls it back.
func (o *op) checkToken(ctx context.Context) error {
	tx, err := o.admin.Begin(ctx)
	if err != nil {
		return err
	}
	defer func() {
		rctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		tx.Rollback(rctx)
	}()
	if o.fin.pair {
		k := advisory.KeyOf(o.full[0])
		return o.m.CheckTokenPair(ctx, tx, advisory.Pair{Class: int32(k >> 32), Object: int32(k)}, o.fin.token)
	}
	return o.m.CheckToken(ctx, tx, o.full[0], o.fin.token)
}
