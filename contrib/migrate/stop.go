package advmigrate

import (
	"fmt"

	"github.com/golang-migrate/migrate/v4"

	"github.com/pgadvisory/advisory"
)

// StopOnLoss makes every later holding of d send true on mg.GracefulStop if its lock is
// lost, so that mg starts no further migration and its Up (Down, Steps, Migrate) returns
// after the one running, with an error wrapping [advisory.ErrLockLost] from Unlock. It
// does not stop the migration running at the loss: that runs on until it ends, or until
// the next holder's drain ends its session (the wrapper tagged it), which rolls it back
// and leaves the version dirty. A stop that no migration consumed stays pending in mg:
// after a loss, close mg and make a new one. Call it before mg's Up; it does not block.
//
// It returns an error wrapping [advisory.ErrInvalidOption] if mg's LockTimeout is not
// longer than the wrapper's wait (see [Driver.Lock]). It panics if mg is nil.
func (d *Driver) StopOnLoss(mg *migrate.Migrate) error {
	if mg == nil {
		panic("advmigrate: StopOnLoss with a nil Migrate")
	}
	if mg.LockTimeout <= d.o.wait {
		return fmt.Errorf("advmigrate: the Migrate's LockTimeout %v is not longer than the wrapper's wait %v "+
			"(WithWait): migrate would give up first and leave the lock held: %w", mg.LockTimeout, d.o.wait,
			advisory.ErrInvalidOption)
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.stops = append(d.stops, mg.GracefulStop)
	return nil
}
