package advisory

import "context"

// A footing is what a Lock stands on. There is one kind per way of holding a lock:
//
//   - a pin of its own (pin.go): the Lock's own session, or its own transaction (the
//     pin's lease decides which: see lease);
//   - a slot on a shared session (sharedHolding, shared_holding.go; see WithSharedSessions);
//   - a re-entered handle on another Lock's footing (reentry, lock_reentry.go).
//
// A Lock's methods delegate to its footing; what a kind cannot do is decided by its own
// method, once. The pin a Lock keeps (Lock.s) is the one whose connection its footing
// is on: its own, its shared session's, or the one of the holding it re-entered.
type footing interface {
	// holds is what is held: the key, its mode, and whether in the two-int4 form.
	holds() target
	// doneChan is closed when the footing ends (Lock.Done).
	doneChan() <-chan struct{}
	// endOf is its end: nil while held, then ErrNotHeld or the loss. Under Lock.s.mu.
	endOf() error
	// unlockFor ends it for l, the Lock that stands on it (Lock.Unlock).
	unlockFor(ctx context.Context, l *Lock) error
	// own returns the pin of a session of the footing's own, for the calls that need one
	// (Token, BeginFunc, File, Publish, Drain), or the error op fails with: a shared slot
	// has none; a re-entered handle has its holding's, unless it has ended, or, with
	// stmt (the call runs a statement on it), while a BeginFunc of the holding runs fn.
	own(op string, l *Lock, stmt bool) (*pin, error)
	// workTag is the holding's work tag (see work.go), made on first use (see lazyTag).
	workTag() string
	// holding is the footing a re-entry nests on: itself, or a re-entered handle's.
	holding() footing
	// nestRefusal is why a re-entry may not nest on it now, or nil. Under Lock.s.mu.
	nestRefusal() error
	// nestedSet is its open re-entered handles. Under Lock.s.mu.
	nestedSet() *nestedLocks
}

// Reentered reports whether l re-entered a holding that its call's ctx carried (see
// [Manager], reentrancy): its Unlock then releases nothing on the server, and it ends when that
// holding ends, if not before. It does not block.
func (l *Lock) Reentered() bool {
	_, ok := l.on.(*reentry)
	return ok
}

// SharesSession reports whether the lock is held on a server session that other holdings
// of its Manager may share (see [WithSharedSessions]): then its loss is the session's,
// and the calls that need a session of the lock's own fail with [ErrSharedSession]. It
// does not block.
func (l *Lock) SharesSession() bool {
	_, ok := l.on.holding().(*sharedHolding)
	return ok
}

// own is the pin of the session of l's own, or the error op fails with (see footing.own).
func (l *Lock) own(op string, stmt bool) (*pin, error) { return l.on.own(op, l, stmt) }
