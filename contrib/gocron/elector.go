package advgocron

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-co-op/gocron/v2"

	"github.com/pgadvisory/advisory"
)

// ErrNotLeader is returned by [Elector.IsLeader] while another replica leads (or none
// does yet).
var ErrNotLeader = errors.New("advgocron: not the leader")

// Elector is a gocron.Elector backed by [advisory.Manager.Lead]: from NewElector to
// Close it campaigns for one lock, holding it (and so leading) for as long as its session
// lives, and campaigning again after a loss. An Elector is safe for concurrent use by
// multiple goroutines.
type Elector struct {
	cancel  context.CancelFunc
	done    chan struct{}
	leading atomic.Pointer[context.Context] // the leader term's context, nil between terms
	final   atomic.Pointer[error]           // why campaigning ended, once it has

	hold    time.Duration
	mu      sync.Mutex
	lastRun time.Time // when IsLeader last returned nil; zero: never
	closing bool      // Close has begun: IsLeader refuses
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector starts campaigning for the lock with the given name in the background and
// returns at once, not yet leader as a rule. An invalid name returns an error wrapping
// [advisory.ErrInvalidKey], a negative hold one wrapping [advisory.ErrInvalidOption].
// Every error retrying can mend (the server unreachable, a failed drain of an earlier
// leader's work, a cancelled statement) is retried with a back-off and reported by m's
// logger and LeadRetry hook (see [advisory.Manager.Lead]). Close stops it. m must stay
// open until then.
//
// hold is the handover's margin: Close keeps the lock, running no job, until hold has
// passed since the last run this replica allowed, so that a replica whose timer fires
// late by less than hold does not lead in time to run that occurrence again. Pick it as
// the Locker's atLeast: larger than the timer skew between replicas, smaller than the
// interval minus that skew (zero: Close hands over at once).
func NewElector(m *advisory.Manager, name string, hold time.Duration) (*Elector, error) {
	if m == nil {
		panic("advgocron: NewElector with a nil Manager")
	}
	if err := advisory.ValidateName(name); err != nil {
		return nil, err
	}
	if hold < 0 {
		return nil, fmt.Errorf("advgocron: hold %v is negative: %w", hold, advisory.ErrInvalidOption)
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Elector{cancel: cancel, done: make(chan struct{}), hold: hold}
	go e.campaign(ctx, m, name)
	return e, nil
}

func (e *Elector) campaign(ctx context.Context, m *advisory.Manager, name string) {
	defer close(e.done)
	err := m.Lead(ctx, name, func(term context.Context) error {
		e.leading.Store(&term)
		defer e.leading.Store(nil)
		<-term.Done() // lost (Lead campaigns again) or Close (Lead returns)
		return nil
	})
	err = fmt.Errorf("advgocron: elector stopped: %w", err)
	e.final.Store(&err)
}

// IsLeader returns nil while this replica holds the leader lock, so gocron runs the job
// here. It does not block and ignores ctx. Otherwise it returns [ErrNotLeader] (also
// while campaigns fail and are retried, and while Close waits out the hold), or, once
// campaigning has stopped (Close, a closed Manager, session holdings asked for behind a
// transaction pooler), an error saying why. A lost lock stops IsLeader returning nil as
// soon as the loss is detected (see the advisory package on loss detection); a job
// already running is not stopped.
func (e *Elector) IsLeader(context.Context) error {
	if e.allowRun() {
		return nil
	}
	if err := e.final.Load(); err != nil {
		return *err
	}
	return ErrNotLeader
}

// Close stops campaigning and releases the leader lock if held. Call it after the
// scheduler's Shutdown. While leading, it first keeps the lock, refusing every run,
// until the hold has passed since the last run this replica allowed (or the lock is
// lost). It blocks until the lock is released: at most the hold, then the release (at
// most 5 s, after which the connection is closed). After Close, IsLeader returns an
// error wrapping context.Canceled. Close may be called more than once.
func (e *Elector) Close() {
	e.mu.Lock()
	e.closing = true
	last := e.lastRun
	e.mu.Unlock()
	if term := e.leading.Load(); term != nil && !last.IsZero() {
		t := time.NewTimer(time.Until(last.Add(e.hold)))
		select {
		case <-t.C:
		case <-(*term).Done():
		}
		t.Stop()
	}
	e.cancel()
	<-e.done
}

// allowRun reports whether this replica leads and may run a job now, and if so notes
// the time (see Close).
func (e *Elector) allowRun() bool {
	term := e.leading.Load()
	if term == nil || (*term).Err() != nil {
		return false
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closing {
		return false
	}
	e.lastRun = time.Now()
	return true
}
