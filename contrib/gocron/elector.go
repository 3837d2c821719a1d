package advgocron

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

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
}

var _ gocron.Elector = (*Elector)(nil)

// NewElector starts campaigning for the lock with the given name in the background and
// returns at once, not yet leader as a rule. An invalid name returns an error wrapping
// [advisory.ErrInvalidKey]. Every error retrying can mend (the server unreachable, a
// failed drain of an earlier leader's work, a cancelled statement) is retried with a
// back-off and reported by m's logger and LeadRetry hook (see [advisory.Manager.Lead]).
// Close stops it. m must stay open until then.
func NewElector(m *advisory.Manager, name string) (*Elector, error) {
	if m == nil {
		panic("advgocron: NewElector with a nil Manager")
	}
	if err := advisory.ValidateName(name); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	e := &Elector{cancel: cancel, done: make(chan struct{})}
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
// while campaigns fail and are retried), or, once campaigning has stopped (Close, a
// closed Manager, session holdings asked for behind a transaction pooler), an error
// saying why. A lost lock stops IsLeader returning nil as soon as the loss is
// detected (see the advisory package on loss detection); a job already running is not
// stopped.
func (e *Elector) IsLeader(context.Context) error {
	if term := e.leading.Load(); term != nil && (*term).Err() == nil {
		return nil
	}
	if err := e.final.Load(); err != nil {
		return *err
	}
	return ErrNotLeader
}

// Close stops campaigning and releases the leader lock if held. It blocks until that is
// done (bounded: the release takes at most 5 s, after which the connection is closed).
// After Close, IsLeader returns an error wrapping context.Canceled. Close may be called
// more than once.
func (e *Elector) Close() {
	e.cancel()
	<-e.done
}
