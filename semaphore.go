package advisory

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"
)

// MaxSemaphoreLimit is the largest limit [Manager.Semaphore] accepts. A full semaphore is
// found full by trying every slot, one round trip each, so the cost of a failed
// TryAcquire, and of each re-check of a waiting Acquire, grows with the limit; and each
// slot held pins a connection of its holder's pool.
const MaxSemaphoreLimit = 128

// A Semaphore lets at most limit holders, across every process that shares the database,
// hold one of its slots at a time. Slot i (0 ≤ i < limit) is the advisory lock named
// "NAME#slot/i", and waiters queue on the lock "NAME#turnstile" (NAME with the
// Manager's namespace, if any): see docs/keys.md for the keys and the psql statements that
// take them. Processes must agree on the limit: one using a larger limit than another
// lets as many holders in as its own limit says.
//
// A Semaphore holds nothing itself and needs no Close. It is safe for concurrent use by
// multiple goroutines.
type Semaphore struct {
	m         *Manager
	name      string // as the Manager hashes it, with its namespace
	limit     int
	slots     []target
	turnstile target
	wake      wakeup // a slot Lock of this Semaphore ended in this process
}

// Semaphore returns the semaphore with the given name and limit. It does not block or
// touch the server. A limit below 1 or above [MaxSemaphoreLimit] returns an error
// wrapping [ErrInvalidOption]; a name that [ValidateName] refuses, or one too long for
// its slot names, an error wrapping [ErrInvalidKey]; a closed Manager, [ErrClosed].
func (m *Manager) Semaphore(name string, limit int) (*Semaphore, error) {
	if limit < 1 || limit > MaxSemaphoreLimit {
		return nil, fmt.Errorf("%w: semaphore limit %d: it must be between 1 and %d", ErrInvalidOption, limit, MaxSemaphoreLimit)
	}
	base, err := m.named(name, false)
	if err != nil {
		return nil, err
	}
	if m.isClosed() {
		return nil, ErrClosed
	}
	s := &Semaphore{m: m, name: base.name, limit: limit, slots: make([]target, limit)}
	for i := range s.slots {
		if s.slots[i], err = named(slotName(base.name, i), false); err != nil {
			return nil, err
		}
		s.slots[i].quiet = true
	}
	if s.turnstile, err = named(base.name+"#turnstile", false); err != nil {
		return nil, err
	}
	s.turnstile.quiet, s.turnstile.hidden = true, true
	return s, nil
}

func slotName(name string, i int) string { return name + "#slot/" + strconv.Itoa(i) }

// Name returns the semaphore's name, with the Manager's namespace if it has one.
func (sem *Semaphore) Name() string { return sem.name }

// Limit returns the number of slots.
func (sem *Semaphore) Limit() int { return sem.limit }

// SlotKeys returns the keys of the slots, slot 0 first: a holder of the semaphore holds
// exactly one of them.
func (sem *Semaphore) SlotKeys() []Key {
	keys := make([]Key, len(sem.slots))
	for i, t := range sem.slots {
		keys[i] = t.key
	}
	return keys
}

// TurnstileKey returns the key of the lock that waiting Acquire calls queue on.
func (sem *Semaphore) TurnstileKey() Key { return sem.turnstile.key }

// TryAcquire takes a free slot if there is one, without waiting: it tries the slots one
// round trip each, from a random one on. If all are held it returns an error wrapping
// [ErrLocked]. It does not queue behind waiting [Semaphore.Acquire] calls: it may take a
// slot that has just been freed ahead of them. ctx governs connecting and the round trips;
// it does not wait for a pool connection when this Manager's locks and waits pin all of
// them ([ErrPoolExhausted]). On any error no slot is held; a ctx that carries a slot of
// this semaphore fails at once with [ErrNotReentrant], as for [Semaphore.Acquire]. The
// returned [Lock] is an ordinary lock on the slot's name: Unlock it to free the slot; Done
// and Err report its loss.
func (sem *Semaphore) TryAcquire(ctx context.Context) (*Lock, error) {
	start := time.Now()
	if err := sem.refuseNested(ctx); err != nil {
		return sem.report(ctx, true, start, nil, sem.error("try acquire", err))
	}
	l, err := sem.tryAll(ctx, false)
	switch {
	case err != nil:
		err = sem.error("try acquire", err)
	case l == nil:
		err = sem.error("try acquire", fmt.Errorf("all %d slots are held: %w", sem.limit, ErrLocked))
	}
	return sem.report(ctx, true, start, l, err)
}

// report tells the Manager's hooks about one Acquire or TryAcquire call, and returns its
// result.
func (sem *Semaphore) report(ctx context.Context, try bool, start time.Time, l *Lock, err error) (*Lock, error) {
	hooks := sem.m.set.hooks
	switch {
	case err != nil && hooks.NotAcquired != nil:
		ev := LockEvent{Name: sem.name, Key: sem.turnstile.key, Try: try, Wait: time.Since(start),
			Reason: failReason(ctx, err), Err: err}
		callUser(sem.m.set.logger, "hook NotAcquired", func() { hooks.NotAcquired(ev) })
	case err == nil:
		ev := l.s.event(time.Since(start), 0, "", nil)
		ev.Try = try
		sem.m.fireAcquired(ev)
	}
	if err != nil {
		return nil, err
	}
	return l, nil
}

// refuseNested returns an error wrapping ErrNotReentrant if ctx carries a live slot of
// this semaphore (see LockFromContext): this Manager's, or another's that the server
// shows held. A semaphore is not reentrant: a second slot would count one caller twice,
// and with every other slot taken its wait would be for itself.
func (sem *Semaphore) refuseNested(ctx context.Context) error {
	h, _ := ctx.Value(holdingKey{}).(*ctxHolding)
	if h == nil {
		return nil
	}
	for i, t := range sem.slots {
		own, foreign := sem.m.carried(h, t)
		switch {
		case own != nil && own.Err() == nil:
			return fmt.Errorf("%w: its ctx carries slot %d of the semaphore (%s), held by this Manager: "+
				"a semaphore is not reentrant", ErrNotReentrant, i, quote(t.name))
		case foreign != nil:
			if err := sem.m.refuseForeign(ctx, foreign); err != nil {
				return err
			}
		}
	}
	return nil
}

// tryAll tries every slot once, from a random one on. It returns (nil, nil) if every
// slot is held elsewhere.
func (sem *Semaphore) tryAll(ctx context.Context, waitPool bool) (*Lock, error) {
	mode := modeTry
	if waitPool {
		mode = modeTrySlot
	}
	start := rand.IntN(sem.limit)
	for i := range sem.limit {
		l, err := sem.m.attempt(ctx, sem.slots[(start+i)%sem.limit], mode)
		if err == nil {
			sem.watchEnd(l)
			return l, nil
		}
		if !errors.Is(err, ErrLocked) {
			return nil, err
		}
	}
	return nil, nil
}

// watchEnd wakes this process's waiting Acquire, and announces to other processes', when
// l ends, so that the slot l frees is tried at once instead of at the next re-check.
func (sem *Semaphore) watchEnd(l *Lock) {
	go func() {
		<-l.Done()
		sem.wake.broadcast()
		sem.announce()
	}()
}

func (sem *Semaphore) error(op string, err error) error {
	if errors.Is(err, ErrClosed) {
		return ErrClosed
	}
	return &opError{op, "semaphore " + quote(sem.name), err}
}

// wakeup is a broadcast: channel returns a channel that the next broadcast closes.
type wakeup struct {
	mu sync.Mutex
	ch chan struct{}
}

func (w *wakeup) channel() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch == nil {
		w.ch = make(chan struct{})
	}
	return w.ch
}

func (w *wakeup) broadcast() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.ch != nil {
		close(w.ch)
		w.ch = nil
	}
}

// Holders returns the sessions that hold a slot, or wait on the server for one, across
// every process, as [Manager.Holders] reports them (Name is the slot's name, such as
// "workers#slot/2"), grouped by slot. Acquire calls queued behind the first waiter are
// not listed: they wait for the turnstile (see [Semaphore.TurnstileKey] and
// [Manager.HoldersKey]). It runs one query on a pool connection; ctx governs it.
func (sem *Semaphore) Holders(ctx context.Context) ([]Holder, error) {
	all, err := sem.m.AllHolders(ctx)
	if err != nil {
		return nil, err
	}
	slot := make(map[Key]bool, sem.limit)
	for _, t := range sem.slots {
		slot[t.key] = true
	}
	var out []Holder
	for _, h := range all {
		if !h.Pair && slot[h.Key] {
			out = append(out, h)
		}
	}
	return out, nil
}
