package advisory

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// A host's statements are batched. Calls do not take the host's turn one by one: each
// queues a request (a try or an unlock of one key), and the host's runner goroutine sends
// every request queued at that moment in one statement (hostBatchSQL; a lone request,
// the try or unlock statement of its mode: see oneRow), on the turn, and answers each. A
// burst of N calls then costs about two round trips, not N, so a few sessions carry what
// a session per call would, and the server runs one statement per batch.
//
// A batch never holds a key twice (see hostSet.choose: a key is reserved on a host from
// the try until its holding's unlock is done), so the order of its requests does not
// matter. A statement that fails part-way has taken or released some of its keys
// (session locks do not roll back): the runner asks the server which of the batch's
// keys the session holds, and puts each back as its request left it (reconcile).

// hostBatchSQL runs a batch on a shared session: $1 the keys, $3 what to do with each (1
// try, 2 try shared, 3 unlock, 4 unlock shared), $2 the ownership token. It returns the
// backend's pid and, if the statement ran on the connection's own backend, each request's
// answer in order (granted, released); on a standby pid 0 and no answer (see
// statements_primary.go).
const hostBatchSQL = lockRowStart + "CASE WHEN " + ownedOnPrimary + ` THEN
  (SELECT pg_catalog.array_agg(CASE t.op
     WHEN 1 THEN pg_catalog.pg_try_advisory_lock(t.k) WHEN 2 THEN pg_catalog.pg_try_advisory_lock_shared(t.k)
     WHEN 3 THEN pg_catalog.pg_advisory_unlock(t.k) WHEN 4 THEN pg_catalog.pg_advisory_unlock_shared(t.k) END
     ORDER BY t.i)
   FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.int8[]), pg_catalog.unnest($3::pg_catalog.int4[]))
     WITH ORDINALITY AS t(k, op, i)) END`

// hostHeldSQL returns which of the keys $1 the backend holds exclusively and which shared.
const hostHeldSQL = `SELECT
  coalesce(pg_catalog.array_agg(k) FILTER (WHERE l.mode OPERATOR(pg_catalog.=) 'ExclusiveLock'), '{}'),
  coalesce(pg_catalog.array_agg(k) FILTER (WHERE l.mode OPERATOR(pg_catalog.=) 'ShareLock'), '{}')
FROM pg_catalog.pg_locks l,
  LATERAL (SELECT l.classid::pg_catalog.int8 OPERATOR(pg_catalog.<<) 32 OPERATOR(pg_catalog.|) l.objid::pg_catalog.int8) AS x(k)
WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.pid OPERATOR(pg_catalog.=) pg_catalog.pg_backend_pid()
  AND l.granted AND l.objsubid OPERATOR(pg_catalog.=) 1 AND k OPERATOR(pg_catalog.=) ANY ($1::pg_catalog.int8[])`

// maxBatch bounds the requests of one statement.
const maxBatch = 1000

// A hostReq is one call's request to its host: take (try) or unlock t's key. The runner
// sets ok (granted, released) or err and closes done.
type hostReq struct {
	t    target
	take bool
	done chan struct{}
	ok   bool
	err  error
}

func (r *hostReq) op() int32 { return batchOp(r.take, r.t.shared) }

// batchOp is hostBatchSQL's code for a try (take) or an unlock of a key, in either mode.
func batchOp(take, shared bool) int32 {
	op := int32(3)
	if take {
		op = 1
	}
	if shared {
		op++
	}
	return op
}

// do queues a request and waits for its answer. An error that wraps ErrLockLost (or
// ErrClosed) is the host's end: the request did nothing, or the host's loss undid it.
func (h *host) do(t target, take bool) (bool, error) {
	r := &hostReq{t: t, take: take, done: make(chan struct{})}
	h.qmu.Lock()
	if h.stopped {
		h.qmu.Unlock()
		return false, h.s.endedError()
	}
	h.queue = append(h.queue, r)
	h.qmu.Unlock()
	select {
	case h.wake <- struct{}{}:
	default: // the runner is awake already, and drains the queue before it sleeps
	}
	<-r.done
	return r.ok, r.err
}

// run is the host's runner: it sends the queued requests in batches until the host ends,
// then fails what is still queued.
func (h *host) run() {
	for {
		select {
		case <-h.wake:
		case <-h.s.Done():
			h.qmu.Lock()
			h.stopped = true
			left := h.queue
			h.queue = nil
			h.qmu.Unlock()
			h.answer(left, h.s.endedError())
			return
		}
		for {
			h.qmu.Lock()
			batch := h.queue[:min(len(h.queue), maxBatch)]
			h.queue = h.queue[len(batch):]
			h.qmu.Unlock()
			if len(batch) == 0 {
				break
			}
			h.runBatch(batch)
		}
	}
}

// answer fails each request of batch not answered yet with err, and closes every done.
func (h *host) answer(batch []*hostReq, err error) {
	for _, r := range batch {
		if err != nil {
			r.ok, r.err = false, err
		}
		close(r.done)
	}
}

// runBatch sends batch on the host's turn, and answers each request.
func (h *host) runBatch(batch []*hostReq) {
	s := h.s
	if err := s.enterCall(context.Background()); err != nil {
		h.answer(batch, err)
		return
	}
	err := s.op(context.Background(), func() error { return s.pin.hostBatch(batch) })
	s.leaveCall()
	var fail error
	if err != nil && (errors.Is(err, ErrLockLost) || errors.Is(err, ErrClosed)) {
		fail = err // the host ended: nothing any request did stands
	}
	h.answer(batch, fail)
}

// hostBatch runs batch on the host pin p, whose turn the runner has, bounded by
// cleanupTimeout. An error the connection survives is each take's error, after the keys
// are put back as the requests left them; anything else is a *connFailure: the host is
// lost.
func (p *pin) hostBatch(batch []*hostReq) error {
	conn := p.pg.Conn()
	conn.SetDeadline(time.Now().Add(cleanupTimeout)) // see Session.unlockKey
	defer conn.SetDeadline(time.Time{})
	var one [1]pgtype.Bool
	var res []pgtype.Bool
	var err error
	if len(batch) == 1 {
		one[0], err = p.oneRow(batch[0])
		res = one[:]
	} else {
		keys, ops := make([]int64, len(batch)), make([]int32, len(batch))
		for i, r := range batch {
			keys[i], ops[i] = int64(r.t.key), r.op()
		}
		res, err = p.batchRow(keys, ops)
	}
	switch {
	case err == nil && len(res) != len(batch):
		return &connFailure{fmt.Errorf("a batch of %d returned %d answers", len(batch), len(res))}
	case err == nil:
		for i, r := range batch {
			r.ok = res[i].Valid && res[i].Bool
			if !r.take && !r.ok {
				r.err = errNotHeldByServer
			}
		}
		return nil
	case !usable(p.pg, err): // a foreign backend's answer too (see batchRow)
		return &connFailure{err}
	}
	if rerr := p.reconcileBatch(batch); rerr != nil {
		return &connFailure{rerr}
	}
	for _, r := range batch {
		if r.take {
			r.ok, r.err = false, classify(err)
		} else {
			r.ok = true
		}
	}
	return nil
}

// reconcileBatch puts the keys of a batch whose statement failed back as the requests
// left them: a key a take got is unlocked, a key an unlock left held is unlocked.
func (p *pin) reconcileBatch(batch []*hostReq) error {
	keys := make([]int64, len(batch))
	for i, r := range batch {
		keys[i] = int64(r.t.key)
	}
	var excl, shared []int64
	if err := p.pc.QueryRow(context.Background(), hostHeldSQL, keys).Scan(&excl, &shared); err != nil {
		return err
	}
	type hold struct {
		key    int64
		shared bool
	}
	held := map[hold]bool{}
	for _, k := range excl {
		held[hold{k, false}] = true
	}
	for _, k := range shared {
		held[hold{k, true}] = true
	}
	var ks []int64
	var ops []int32
	for _, r := range batch {
		if k := int64(r.t.key); held[hold{k, r.t.shared}] {
			ks, ops = append(ks, k), append(ops, batchOp(false, r.t.shared))
		}
	}
	if len(ks) == 0 {
		return nil
	}
	_, err := p.batchRow(ks, ops)
	return err
}

// oneRow runs a batch of one request, r, alone, as a Session runs one key's statement
// (see takeOne): the try or unlock statement of its mode (statements.go), which is
// hostBatchSQL for one key without its arrays to encode, unnest, aggregate and decode,
// and on a direct connection the bare lock function, with no check of its backend. It
// returns the answer, or the error of a statement that ran on a standby or on another
// client's backend (checkOwned), or the statement's own.
func (p *pin) oneRow(r *hostReq) (pgtype.Bool, error) {
	st := &baseStatements[b2i(p.st.direct)][b2i(r.t.shared)][0]
	sql := st.unlock
	if r.take {
		sql = st.tryLock
	}
	p.argKey = int64(r.t.key) // the runner has the session's turn
	pid, ok, err := p.row(context.Background(), sql, false)
	if err == nil {
		err = p.checkOwned(pid, ok)
	}
	if err != nil {
		return pgtype.Bool{}, err
	}
	return pgtype.Bool{Bool: *ok, Valid: true}, nil
}

// batchRow runs hostBatchSQL for keys and ops and returns its answers; an error
// wrapping ErrPooler if the statement ran on another client's backend (it did nothing
// there).
func (p *pin) batchRow(keys []int64, ops []int32) ([]pgtype.Bool, error) {
	var pid uint32
	var res []pgtype.Bool
	if err := p.pc.QueryRow(context.Background(), hostBatchSQL, keys, p.token, ops).Scan(&pid, &res); err != nil {
		return nil, err
	}
	switch {
	case pid == 0:
		return nil, standbyError()
	case res == nil || pid != p.pid:
		return nil, p.foreignError()
	}
	return res, nil
}
