package advgocron

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/pgadvisory/advisory"
)

// unlockTimeout bounds an unlock the adapter runs on its own, after the caller's ctx may
// have ended; past it the connection is closed, which frees the lock too.
const unlockTimeout = 5 * time.Second

// Locker is a gocron.Locker backed by advisory locks: the lock name is gocron's key, the
// job's name (name jobs with gocron.WithName: the default, the function's name, changes
// when the code is refactored). Lock does not wait: if another replica holds the lock,
// it fails and gocron skips the run. A Locker is safe for concurrent use by multiple
// goroutines.
//
// On a graceful shutdown, call [Locker.Close] after the scheduler's Shutdown and before
// the Manager's Close: it waits for the holds not yet over, so that a replica leaving
// right after it ran an occurrence does not free that occurrence for a replica whose
// timer fires late.
type Locker struct {
	m       *advisory.Manager
	atLeast time.Duration

	mu     sync.Mutex
	closed bool
	locks  int           // taken by Lock and not yet released (a hold counts)
	none   chan struct{} // closed when locks falls to 0; a new one when it rises again
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker that takes locks with m and keeps each for at least atLeast
// after it was taken (zero: released as soon as the job returns). Pick atLeast larger
// than the timer skew between replicas and smaller than the job's interval minus that
// skew: a hold still running when the next occurrence fires makes every replica skip it.
// A negative atLeast returns an error wrapping [advisory.ErrInvalidOption]. It does not
// block. m must stay open while the scheduler runs; closing it releases every lock,
// including holds not yet over: call [Locker.Close] first.
func NewLocker(m *advisory.Manager, atLeast time.Duration) (*Locker, error) {
	if m == nil {
		panic("advgocron: NewLocker with a nil Manager")
	}
	if atLeast < 0 {
		return nil, fmt.Errorf("advgocron: atLeast %v is negative: %w", atLeast, advisory.ErrInvalidOption)
	}
	none := make(chan struct{})
	close(none)
	return &Locker{m: m, atLeast: atLeast, none: none}, nil
}

// Lock takes the lock named key if no other session holds it (see
// [advisory.Manager.TryLock]); it does not wait for it. If the lock is held elsewhere it
// returns an error wrapping [advisory.ErrLocked], and gocron skips the run. ctx (gocron
// passes the job's) governs connecting and the round trip; on any error the lock is not
// held.
//
// gocron calls the returned Lock's Unlock right after the job. While the hold (atLeast
// since Lock) is not over, Unlock returns nil at once and a goroutine releases the lock
// when the hold ends, or earlier if the lock is lost or the Manager closed. After the
// hold, Unlock releases before it returns, bounded by 5 s of its own (ctx's end is
// ignored: gocron's job context ends at shutdown). Unlock returns an error wrapping
// [advisory.ErrLockLost] if the lock was lost while the job ran (gocron ignores it; the
// job was not stopped), and one wrapping [advisory.ErrNotHeld] when called again.
//
// After [Locker.Close] has begun, Lock returns an error wrapping [advisory.ErrClosed]
// and takes nothing.
func (lk *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	if err := lk.taking(); err != nil {
		return nil, err
	}
	l, err := lk.m.TryLock(ctx, key)
	if err != nil {
		lk.released()
		return nil, err
	}
	return &jobLock{lk: lk, l: l, until: time.Now().Add(lk.atLeast)}, nil
}

// Close stops the Locker taking locks and waits until every lock it took is released:
// the jobs running return (gocron calls Unlock) and each hold not yet over ends, when
// atLeast has passed since its Lock, or earlier if its lock is lost or the Manager
// closed. Call it after the scheduler's Shutdown (which waits for the running jobs) and
// before the Manager's Close, which would end the holds at once: a replica whose timer
// fires late could then run the occurrence this one just ran. It blocks for at most the
// longest hold left, unless a job still running does not return. ctx bounds the wait; if
// it ends first, Close returns an error wrapping ctx's cause, and the locks not yet
// released stay held until their holds end (or the Manager closes). Calling Close again
// waits again; after Close, Lock returns an error wrapping [advisory.ErrClosed].
func (lk *Locker) Close(ctx context.Context) error {
	lk.mu.Lock()
	lk.closed = true
	lk.mu.Unlock()
	for {
		lk.mu.Lock()
		n, none := lk.locks, lk.none
		lk.mu.Unlock()
		if n == 0 {
			return nil
		}
		select {
		case <-none:
		case <-ctx.Done():
			return fmt.Errorf("advgocron: close: %d locks not yet released: %w", n, context.Cause(ctx))
		}
	}
}

// taking counts a lock about to be taken, unless the Locker is closed.
func (lk *Locker) taking() error {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	if lk.closed {
		return fmt.Errorf("advgocron: Locker closed: %w", advisory.ErrClosed)
	}
	if lk.locks == 0 {
		lk.none = make(chan struct{})
	}
	lk.locks++
	return nil
}

// released counts a lock released (or never taken).
func (lk *Locker) released() {
	lk.mu.Lock()
	defer lk.mu.Unlock()
	lk.locks--
	if lk.locks == 0 {
		close(lk.none)
	}
}

// jobLock is one held job lock; gocron calls Unlock once the job returns.
type jobLock struct {
	lk    *Locker
	l     *advisory.Lock
	until time.Time
	once  sync.Once
}

// Unlock releases the lock, now or when the hold ends (see [Locker.Lock]).
func (j *jobLock) Unlock(ctx context.Context) error {
	err := fmt.Errorf("advgocron: unlock %q: %w", j.l.Name(), advisory.ErrNotHeld)
	j.once.Do(func() { err = j.release(ctx) })
	return err
}

// release unlocks now, or starts the hold's goroutine; the Locker counts the lock
// released once it is.
func (j *jobLock) release(ctx context.Context) error {
	if err := j.l.Err(); err != nil {
		j.lk.released()
		return err
	}
	ctx = context.WithoutCancel(ctx)
	d := time.Until(j.until)
	if d <= 0 {
		defer j.lk.released()
		return unlock(ctx, j.l)
	}
	go func() {
		defer j.lk.released()
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-t.C:
		case <-j.l.Done():
		}
		unlock(ctx, j.l)
	}()
	return nil
}

func unlock(ctx context.Context, l *advisory.Lock) error {
	ctx, cancel := context.WithTimeout(ctx, unlockTimeout)
	defer cancel()
	return l.Unlock(ctx)
}
