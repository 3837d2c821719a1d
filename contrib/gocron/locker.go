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
type Locker struct {
	m       *advisory.Manager
	atLeast time.Duration
}

var _ gocron.Locker = (*Locker)(nil)

// NewLocker returns a Locker that takes locks with m and keeps each for at least atLeast
// after it was taken (zero: released as soon as the job returns). Pick atLeast larger
// than the timer skew between replicas and smaller than the job's interval minus that
// skew: a hold still running when the next occurrence fires makes every replica skip it.
// A negative atLeast returns an error wrapping [advisory.ErrInvalidOption]. It does not
// block. m must stay open while the scheduler runs; closing it releases every lock,
// including holds not yet over.
func NewLocker(m *advisory.Manager, atLeast time.Duration) (*Locker, error) {
	if m == nil {
		panic("advgocron: NewLocker with a nil Manager")
	}
	if atLeast < 0 {
		return nil, fmt.Errorf("advgocron: atLeast %v is negative: %w", atLeast, advisory.ErrInvalidOption)
	}
	return &Locker{m: m, atLeast: atLeast}, nil
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
func (lk *Locker) Lock(ctx context.Context, key string) (gocron.Lock, error) {
	l, err := lk.m.TryLock(ctx, key)
	if err != nil {
		return nil, err
	}
	return &jobLock{l: l, until: time.Now().Add(lk.atLeast)}, nil
}

// jobLock is one held job lock; gocron calls Unlock once the job returns.
type jobLock struct {
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

func (j *jobLock) release(ctx context.Context) error {
	if err := j.l.Err(); err != nil {
		return err
	}
	ctx = context.WithoutCancel(ctx)
	d := time.Until(j.until)
	if d <= 0 {
		return unlock(ctx, j.l)
	}
	go func() {
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
