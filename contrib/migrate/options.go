package advmigrate

import (
	"fmt"
	"time"

	"github.com/golang-migrate/migrate/v4/source"

	"github.com/pgadvisory/advisory"
)

// DefaultWait is how long [Driver.Lock] waits for the lock unless [WithWait] says
// otherwise: shorter than migrate's DefaultLockTimeout (15 s), so that the wrapper's wait
// ends first and leaves nothing queued.
const DefaultWait = 10 * time.Second

// An Option configures [Wrap].
type Option func(*options) error

type options struct {
	wait    time.Duration
	recover source.Driver // WithRecoverDirty; nil: off
}

func defaults() options { return options{wait: DefaultWait} }

// parseOptions applies opts to the defaults.
func parseOptions(opts []Option) (options, error) {
	o := defaults()
	for _, opt := range opts {
		if err := opt(&o); err != nil {
			return options{}, err
		}
	}
	return o, nil
}

// WithWait sets how long [Driver.Lock] waits for the lock before it fails (migrate has no
// ctx to give it). The default is [DefaultWait] (10 s). Set the Migrate's LockTimeout
// longer (see [Driver.Lock]). A wait that is not positive returns an error wrapping
// [advisory.ErrInvalidOption].
func WithWait(wait time.Duration) Option {
	return func(o *options) error {
		if wait <= 0 {
			return fmt.Errorf("advmigrate: wait %v is not positive: %w", wait, advisory.ErrInvalidOption)
		}
		o.wait = wait
		return nil
	}
}

// WithRecoverDirty makes [Driver.Lock] mend a version an interrupted migration left dirty:
// holding the lock, after the drain has ended the sessions of earlier holders (the
// interrupted migration's among them, rolled back), it sets the version to the one before
// the dirty one in src (none: -1), so that migrate runs the interrupted migration again.
// Done under the lock, it cannot race another replica's Up. The default is off: migrate's
// Up then fails with ErrDirty until someone runs Force. Use it only if every migration
// runs in one transaction (golang-migrate sends a PostgreSQL file as one query unless it
// has BEGIN/COMMIT of its own, statements that cannot run in a transaction, or
// x-multi-statement is on): a migration that failed half-way is otherwise run again on
// what it left, and one that failed on an error of its own fails again, dirty again. Give
// it a source of its own (such as file.File's Open of the Migrate's source URL); it is
// only read. A nil src returns an error wrapping [advisory.ErrInvalidOption].
func WithRecoverDirty(src source.Driver) Option {
	return func(o *options) error {
		if src == nil {
			return fmt.Errorf("advmigrate: WithRecoverDirty with a nil source: %w", advisory.ErrInvalidOption)
		}
		o.recover = src
		return nil
	}
}
