package advisory

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
)

// Reentrancy. A lock call whose ctx carries a holding of the same lock (see
// LockFromContext) is made by code that runs under that holding: a wait for the lock
// would wait for the caller itself, forever. So such a call never waits:
//
//   - the holding is this Manager's, in a mode that covers the call's (exclusive covers
//     both, shared covers shared): the call re-enters it and returns at once a Lock of its
//     own, counted on the holding's pin, that ends with the holding or at its own Unlock,
//     which releases nothing on the server;
//   - the holding is this Manager's but shared, and the call exclusive: ErrNotReentrant
//     (an upgrade would wait for the holding itself, and for every other shared holder);
//   - the holding is another Manager's, and the server the call reaches shows it held
//     there: ErrNotReentrant (the server would make the call wait for the holding).
//
// A ctx carries every holding it was given, innermost first (ctxHolding), so that a
// call under "y" under "x" still finds "x".

// ctxHolding is what a ctx carries (see ContextWithLock): a holding, and those the ctx
// carried before it.
type ctxHolding struct {
	l    *Lock
	next *ctxHolding
}

type holdingKey struct{}

// ContextWithLock returns a copy of ctx that carries l, so that calls made with it (or a
// ctx derived from it) re-enter l's holding instead of waiting for it: see [Manager],
// reentrancy. [Manager.Do], DoTx, TryDo and Lead give fn such a ctx; use
// ContextWithLock after [Manager.Lock] to pass the holding to code that may lock the
// same name. The ctx also keeps the holdings ctx carried. It does not block; it panics if
// l is nil.
func ContextWithLock(ctx context.Context, l *Lock) context.Context {
	if l == nil {
		panic("advisory: ContextWithLock with a nil Lock")
	}
	next, _ := ctx.Value(holdingKey{}).(*ctxHolding)
	return context.WithValue(ctx, holdingKey{}, &ctxHolding{l: l, next: next})
}

// LockFromContext returns the Lock whose holding a function run by [Manager.Do],
// [Manager.DoTx], [Manager.TryDo] or [Manager.Lead] runs under, given that function's
// ctx (or one derived from it), or the Lock given to [ContextWithLock]; the innermost if
// the ctx carries several; nil for any other ctx. Use it to tag the function's own
// connections ([Lock.WorkConnString], [Lock.WorkConfig]). It does not block.
func LockFromContext(ctx context.Context) *Lock {
	if h, _ := ctx.Value(holdingKey{}).(*ctxHolding); h != nil {
		return h.l
	}
	return nil
}

// carried returns the holding of t's lock that ctx carries: this Manager's (own) if
// any, else another Manager's (foreign).
func (m *Manager) carried(h *ctxHolding, t target) (own, foreign *Lock) {
	for ; h != nil; h = h.next {
		switch l := h.l; {
		case l.Key() != t.key || l.pairForm() != t.pair:
		case l.s.m == m:
			return h.l, nil
		case foreign == nil:
			foreign = h.l
		}
	}
	return nil, foreign
}

// reenter decides a lock call whose ctx carries holdings (see the rules above). With
// handled false the call goes on as any other: ctx carries no holding of t's lock, or
// another Manager's that the server does not show held.
func (m *Manager) reenter(ctx context.Context, h *ctxHolding, t target, op string) (l *Lock, handled bool, err error) {
	own, foreign := m.carried(h, t)
	switch {
	case own != nil:
		l, err = m.reentered(ctx, own, t)
	case foreign != nil:
		err = m.refuseForeign(ctx, foreign)
	}
	if err != nil {
		return nil, true, lockError(op, t, err)
	}
	return l, l != nil, nil
}

// reentered makes the re-entered Lock of t under c, a holding of this Manager.
func (m *Manager) reentered(ctx context.Context, c *Lock, t target) (*Lock, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := c.Err(); err != nil {
		return nil, &causeError{"the holding its ctx carries has ended", err}
	}
	if c.Shared() && !t.shared {
		return nil, fmt.Errorf("%w: its ctx carries a shared holding of the lock, and the call is exclusive", ErrNotReentrant)
	}
	l, depth, err := c.nest(t.name)
	if err != nil {
		return nil, &causeError{"the holding its ctx carries has ended", err}
	}
	c.s.log(slog.LevelDebug, "advisory: lock re-entered", slog.Int("open", depth))
	return l, nil
}

// refuseForeign returns ErrNotReentrant if c, another Manager's holding of the lock, is
// held in this Manager's database, as the server this Manager reaches shows it (c's
// backend, in c's database, is this one's: pg_locks is the whole server's); nil if it
// is not (another database or server, or c has ended: the call may wait as any other).
func (m *Manager) refuseForeign(ctx context.Context, c *Lock) error {
	conn, err := m.pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("ask whether the holding its ctx carries is on this server: %w", err)
	}
	defer conn.Release()
	pg := conn.Conn().PgConn()
	if db, _ := pg.CustomData()[dbOIDKey].(uint32); db != c.s.dbOID {
		return nil // another database: another lock of the same key
	}
	err = c.s.heldOnServer(ctx, pg, c.Key(), c.pairForm())
	switch {
	case err == nil:
		return fmt.Errorf("%w: its ctx carries another Manager's holding of the lock, on this server "+
			"(backend pid %d): make the call with that Manager", ErrNotReentrant, c.s.pid)
	case errors.Is(err, ErrLockLost):
		return nil
	}
	return err
}

// A re-entered Lock stands on a reentry: it shares its holding's pin, so that what it
// reads or runs on the holding (Key, PID, Token, BeginFunc, the work tag, Drain) is the
// holding's; it has its own end: Done, Err and Unlock are its own. The holding keeps its
// open re-entered Locks (footing.nestedSet, under the pin's mu) and ends them when it ends
// or its release begins, so that they are told before the server frees the lock.
type reentry struct {
	of   footing // the holding it re-entered: a pin, or a sharedHolding
	done chan struct{}
	err  error // under the pin's mu; nil while open
}

// errHoldingReleased is the end of a re-entered Lock whose holding was released (by
// the Unlock of the Lock it re-entered, or by Do's end) while it was open.
var errHoldingReleased = fmt.Errorf("%w: the holding it re-entered was released", ErrNotHeld)

// errHoldingReleasing is the error of a re-entry while the holding is being released.
var errHoldingReleasing = fmt.Errorf("%w: the holding is being released", ErrNotHeld)

// nest opens a re-entered Lock named name on l's holding, and returns it with the
// number of the holding's open re-entered Locks; or the holding's end.
func (l *Lock) nest(name string) (*Lock, int, error) {
	p, f := l.s, l.on.holding()
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := f.nestRefusal(); err != nil {
		return nil, 0, err
	}
	r := &reentry{of: f, done: make(chan struct{})}
	return &Lock{s: p, on: r, name: name}, f.nestedSet().add(r), nil
}

// nestedLocks are a holding's open re-entered Locks: a pin's, or a sharedHolding's. The
// holding's pin's mu guards them.
type nestedLocks map[*reentry]struct{}

// add records r, and returns how many are open.
func (n *nestedLocks) add(r *reentry) int {
	if *n == nil {
		*n = nestedLocks{}
	}
	(*n)[r] = struct{}{}
	return len(*n)
}

// endNested ends the pin's open re-entered Locks as its release begins (under p.mu):
// endErr ErrNotHeld (an Unlock) ends them as released, else with endErr.
func (p *pin) endNested(endErr error) {
	if endErr == ErrNotHeld {
		endErr = errHoldingReleased
	}
	p.nested.endAll(endErr)
}

// endAll ends every open one with err, and forgets them.
func (n *nestedLocks) endAll(err error) {
	for r := range *n {
		r.err = err
		close(r.done)
	}
	*n = nil
}

func (r *reentry) holds() target             { return r.of.holds() }
func (r *reentry) doneChan() <-chan struct{} { return r.done }
func (r *reentry) endOf() error              { return r.err }
func (r *reentry) workTag() string           { return r.of.workTag() }
func (r *reentry) holding() footing          { return r.of }
func (r *reentry) nestRefusal() error        { return r.of.nestRefusal() }
func (r *reentry) nestedSet() *nestedLocks   { return r.of.nestedSet() }

// unlockFor is Unlock of a re-entered Lock: it ends l alone, with no statement.
func (r *reentry) unlockFor(_ context.Context, l *Lock) error {
	p := l.s
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := r.err; err != nil {
		return err
	}
	r.err = ErrNotHeld
	delete(*r.of.nestedSet(), r)
	close(r.done)
	return nil
}

// own is the holding's session, if it has one of its own: first l's own end, if it has
// ended; then, for a call that runs a statement on it (BeginFunc, Token, Publish,
// Drain), ErrNotReentrant while a BeginFunc of the holding runs fn: the call would wait
// for that transaction, and code run by its fn (a nested DoTx, say) would wait for
// itself.
func (r *reentry) own(op string, l *Lock, stmt bool) (*pin, error) {
	p, err := r.of.own(op, l, stmt)
	if err != nil {
		return nil, err
	}
	if err := l.Err(); err != nil {
		return nil, err
	}
	if stmt && p.inFn.Load() {
		return nil, &opError{op, p.describe(), fmt.Errorf("%w: a transaction of the holding is in progress "+
			"(BeginFunc, DoTx): use that transaction", ErrNotReentrant)}
	}
	return p, nil
}
