package modelcheck

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory"
)

// The calls the model makes: one op is one call of the public API.

type opKind int

const (
	opLock        opKind = iota // Manager.Lock / LockShared
	opTryLock                   // Manager.TryLock / TryLockShared
	opUnlock                    // Lock.Unlock (live, unlocked or lost Locks)
	opSession                   // Manager.Session
	opSLock                     // Session.Lock
	opSTryLock                  // Session.TryLock
	opSLockAll                  // Session.LockAll
	opSTryLockAll               // Session.TryLockAll
	opSUnlock                   // Session.Unlock
	opSClose                    // Session.Close
	opDo                        // Manager.Do
	opLead                      // Manager.Lead
	opHolders                   // Manager.Holders
	opTerminate                 // pg_terminate_backend of a random holder, from the admin pool
	opClose                     // Manager.Close, calls after it, and a new Manager in its place
	opBegin                     // Lock.BeginFunc (live, unlocked or lost Locks); see fence_ops.go
	opSBegin                    // Session.BeginFunc
	opDoTx                      // Manager.DoTx
	opToken                     // Lock.Token
	opCheckToken                // Manager.CheckToken in a transaction of the admin pool
	opKinds                     // the number of kinds
)

var opNames = [...]string{"Lock", "TryLock", "Unlock", "Session", "S.Lock", "S.TryLock", "S.LockAll",
	"S.TryLockAll", "S.Unlock", "S.Close", "Do", "Lead", "Holders", "terminate", "Close",
	"BeginFunc", "S.BeginFunc", "DoTx", "Token", "CheckToken"}

func (k opKind) String() string { return opNames[k] }

// fnKind is what the function given to Do or Lead does.
type fnKind int

const (
	fnNil   fnKind = iota // returns nil
	fnErr                 // returns errModelFn
	fnPanic               // panics with a modelPanic
	fnWait                // returns nil after fnWait, or ctx.Err() when its ctx ends first
)

var errModelFn = errors.New("model: fn failed")

type modelPanic struct {
	step, op int
	nested   bool // the fn of the op's nested Do or TryDo (see nested.go)
}

// op is one call, its inputs fixed before the batch runs, and its result.
type op struct {
	step   int
	idx    int
	kind   opKind
	slot   string
	m      *advisory.Manager
	app    string // the Manager's application_name
	dsn    string // opClose: for the new Manager
	lh     *lockH
	sh     *sessH
	names  []string // short names
	full   []string // the same, as lock names
	keys   []advisory.Key
	shared bool
	byKey  bool // opLock, opTryLock: LockKey or TryLockKey of the name's key
	plan   ctxPlan
	fn     fnKind
	fnWait time.Duration
	pick   float64       // opTerminate: which holder
	after  time.Duration // the call starts this long after the batch does
	apps   []string      // opTerminate: our application_names
	fin    fenceInput    // the fenced calls', Token's and CheckToken's
	txOpts bool          // opBegin, opSBegin on a transaction holding: BeginTxFunc with options
	nest   *nestCall     // opDo: the call its fn makes under the holding (see nested.go), or nil

	admin *pgxpool.Pool     // the harness's pool, for pg_locks, terminations, CheckToken
	opts  []advisory.Option // opClose: the new Manager's options (its slot's)

	// From the model, before the batch runs.
	pre        hState          // the target Lock or Session's state
	preHeld    int             // session calls: how many of names the Session held; opSUnlock: its count
	heldBefore map[string]bool // session calls: which of names the Session held
	isolated   bool            // no other call of the batch touches the same keys or handles
	disrupted  bool            // the batch terminates a backend or closes a Manager
	free       bool            // nothing the model knows of conflicts with the call's keys
	rivalClose bool            // another call of the batch closes or unlocks the same Session or Lock

	res result
}

type result struct {
	err      error
	panicked any
	start    time.Time
	end      time.Time
	ctxEnd   time.Time
	ctxEnded bool
	ctxErr   error // the ctx's error after the call, if it had ended
	checks   int   // ctxCheck: how many times the call checked ctx.Err (up to n)
	lock     *advisory.Lock
	sess     *advisory.Session
	fnCalls  int
	fnPIDs   []uint32
	fnBad    []string // fn ran without pg_locks showing the lock held for it
	victim   uint32
	bad      []string // opClose: calls after Close that did not return ErrClosed
	newMgr   *advisory.Manager
	holders  []advisory.Holder
	fence    fenceResult // the fenced calls' and Token's results
}

// isCtx reports whether err is the call's ctx's error (so the ctx did end), and only
// that: an ended ctx is no reason to report a loss (calls that may report one accept
// ErrLockLost where a loss is explained).
func (o *op) isCtx(err error) bool {
	return o.res.ctxErr != nil && errors.Is(err, o.res.ctxErr) && !errors.Is(err, advisory.ErrLockLost)
}

func isDeadlock(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "40P01"
}

func (o *op) String() string {
	var call string
	switch o.kind {
	case opLock, opTryLock:
		mode := ""
		switch {
		case o.shared:
			mode = "Shared"
		case o.byKey:
			mode = "Key"
		}
		call = fmt.Sprintf("%s.%s%s(%s)", o.slot, o.kind, mode, o.names[0])
	case opUnlock:
		call = fmt.Sprintf("%v[%v].Unlock", o.lh, o.pre)
	case opSession:
		call = o.slot + ".Session"
	case opSLock, opSTryLock, opSUnlock:
		call = fmt.Sprintf("%v[%v].%s(%s)", o.sh, o.pre, strings.TrimPrefix(o.kind.String(), "S."), o.names[0])
	case opSLockAll, opSTryLockAll:
		call = fmt.Sprintf("%v[%v].%s(%v)", o.sh, o.pre, strings.TrimPrefix(o.kind.String(), "S."), o.names)
	case opSClose:
		call = fmt.Sprintf("%v[%v].Close", o.sh, o.pre)
	case opDo, opLead:
		call = fmt.Sprintf("%s.%s(%s, fn=%s)", o.slot, o.kind, o.names[0], [...]string{"nil", "err", "panic", "wait " + o.fnWait.String()}[o.fn])
		if o.nest != nil {
			call += fmt.Sprintf(" nesting [%v]", o.nest)
		}
	case opHolders:
		call = fmt.Sprintf("%s.Holders(%s)", o.slot, o.names[0])
	case opTerminate:
		return fmt.Sprintf("terminate(after %v)", o.after)
	case opClose:
		return o.slot + ".Close+New"
	default:
		call = o.fenceString()
	}
	iso := ""
	if o.isolated {
		iso = " iso"
	}
	return fmt.Sprintf("%s ctx=%v%s", call, o.plan, iso)
}

// outcome describes the result for the trace.
func (o *op) outcome() string {
	r := &o.res
	var s string
	switch {
	case r.panicked != nil:
		s = fmt.Sprintf("panic %v", r.panicked)
	case r.err != nil:
		s = "err: " + shorten(r.err.Error(), 200)
	case r.lock != nil:
		s = fmt.Sprintf("ok pid %d", r.lock.PID())
	case r.sess != nil:
		s = fmt.Sprintf("ok pid %d", r.sess.PID())
	case o.kind == opTerminate && r.victim == 0:
		s = "no holder"
	case o.kind == opTerminate:
		s = fmt.Sprintf("terminated pid %d", r.victim)
	default:
		s = "ok"
	}
	s += r.fence.String()
	if r.fnCalls > 0 {
		s += fmt.Sprintf(" fn ran %dx (pids %v)", r.fnCalls, r.fnPIDs)
	}
	took := r.end.Sub(r.start).Round(time.Millisecond)
	if r.ctxEnded {
		return fmt.Sprintf("%s [%v; ctx ended at +%v]", s, took, r.ctxEnd.Sub(r.start).Round(time.Millisecond))
	}
	return fmt.Sprintf("%s [%v]", s, took)
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-20] + " … " + s[len(s)-17:]
}
