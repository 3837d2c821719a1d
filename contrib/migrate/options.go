package advmigrate

import (
	"fmt"
	"time"

	"github.com/pgadvisory/advisory"
)

// DefaultWait is how long [Driver.Lock] waits for the lock unless [WithWait] says
// otherwise: shorter than migrate's DefaultLockTimeout (15 s), so that the wrapper's wait
// ends first and leaves nothing queued.
const DefaultWait = 10 * time.Second

// An Option configures [Wrap].
type Option func(*options) error

type options struct {
	wait time.Duration
}

func defaults() options { return options{wait: DefaultWait} }

// WithWait sets how long [Driver.Lock] waits for the lock before it fails (migrate has no
// ctx to give it). The default is [DefaultWait] (10 s). Set the Migrate's LockTimeout
// longer. A wait that is not positive returns an error wrapping
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
