package advmigrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/golang-migrate/migrate/v4/database"

	"github.com/pgadvisory/advisory"
)

// unlockTimeout bounds the statements Unlock and Close run (migrate gives them no ctx);
// past it the lock's connection is closed, which frees the lock too.
const unlockTimeout = 5 * time.Second

// Driver is a database.Driver whose Lock and Unlock take and release an advisory lock
// with an [advisory.Manager]; Open, Close, Run, SetVersion, Version and Drop go to the
// wrapped driver. While a holding is current, its loss makes Run, Drop and a SetVersion
// that marks a migration as started fail with an error wrapping [advisory.ErrLockLost]:
// migrate starts no further migration, and its Up (Down, Steps, Migrate) returns that
// error. The migration running at the loss runs on until it ends, or until the next
// holder's drain ends its session (its Run then returns that error joined with the
// loss). After a loss, the same Migrate's next Up takes the lock again and goes on from
// the recorded version.
// A Driver is safe for concurrent use by multiple goroutines, as migrate uses it.
type Driver struct {
	inner database.Driver
	m     *advisory.Manager
	name  string
	o     options

	mu      sync.Mutex
	locking bool           // a Lock is waiting
	l       *advisory.Lock // the holding; nil when unlocked
	ranOK   bool           // the last call was a Run that succeeded
	closed  bool
}

var _ database.Driver = (*Driver)(nil)

// Wrap returns d with its lock replaced by the advisory lock name, taken with m (see
// [Driver.Lock]). d's own lock (pg_advisory_lock on a key of its own) is never taken
// through the wrapper; d's constructor (WithInstance, Open) takes it once, briefly, to
// create its version table. An invalid option returns an error wrapping
// [advisory.ErrInvalidOption]. It does not block. It panics if d or m is nil. The Driver
// takes d over (its Close closes d, as migrate's Close expects); m must stay open while
// the Driver is used, and closing m ends any holding.
//
// When m goes through a transaction pooler ([advisory.Bounds].TransactionPooler), Wrap
// refuses d with an error wrapping [advisory.ErrPooler] and leaves d open: d's
// constructor has already taken and released its session lock through the pooler, which
// can leave the lock on a pooled server connection where the next replica's constructor
// waits for it forever. Build the driver with [Open] there.
func Wrap(d database.Driver, m *advisory.Manager, name string, opts ...Option) (*Driver, error) {
	if d == nil || m == nil {
		panic("advmigrate: Wrap with a nil Driver or Manager")
	}
	o, err := parseOptions(opts)
	if err != nil {
		return nil, err
	}
	if m.Bounds().TransactionPooler {
		return nil, errConstructor("Wrap")
	}
	return &Driver{inner: d, m: m, name: name, o: o}, nil
}

// errConstructor is what Wrap and Driver.Open return behind a transaction pooler.
func errConstructor(what string) error {
	return fmt.Errorf("advmigrate: %s refused behind a transaction pooler: golang-migrate's driver constructor "+
		"(WithInstance, Open) takes a session pg_advisory_lock that the pooler can leave on a pooled server "+
		"connection, where the next replica's constructor waits for it forever; build the driver with "+
		"advmigrate.Open(ctx, m, dsn, name, &pgx.Config{}, opts...) instead: %w", what, advisory.ErrPooler)
}

// Open opens a new instance of the wrapped driver from url (see database.Driver) and wraps
// it with the same Manager, name and options. migrate calls it only through
// database.Open, which the wrapper is never registered with. Behind a transaction pooler
// it refuses, as [Wrap] does, without opening anything (the package's [Open] is the safe
// constructor there).
func (d *Driver) Open(url string) (database.Driver, error) {
	if d.pooled() {
		return nil, errConstructor("Driver.Open")
	}
	inner, err := d.inner.Open(url)
	if err != nil {
		return nil, err
	}
	return &Driver{inner: inner, m: d.m, name: d.name, o: d.o}, nil
}

// Close releases the lock if it is still held (migrate gave up waiting for a Lock that
// then succeeded, or a call failed between Lock and Unlock), then closes the wrapped
// driver. It does not close the Manager.
func (d *Driver) Close() error {
	d.mu.Lock()
	d.closed = true
	l := d.take()
	d.mu.Unlock()
	if l != nil {
		release(l)
	}
	return d.inner.Close()
}

// Run runs a migration on the wrapped driver, unless the current holding was lost. A
// migration that fails when the holding has been lost meanwhile returns its error joined
// with the loss ([advisory.ErrLockLost]). Behind a transaction pooler it carries the
// holding's tag for its own transaction (see the package doc); a one-statement migration
// that cannot run in a transaction block (CREATE INDEX CONCURRENTLY) runs untagged.
func (d *Driver) Run(migration io.Reader) error {
	if err := d.check("run a migration"); err != nil {
		return err
	}
	d.mu.Lock()
	l := d.l
	d.mu.Unlock()
	var err error
	if l != nil && d.pooled() {
		err = d.runTagged(l, migration)
	} else {
		err = d.inner.Run(migration)
	}
	d.mu.Lock()
	d.ranOK = err == nil
	l = d.l
	d.mu.Unlock()
	if err != nil && l != nil && l.Err() != nil { // the next holder's drain ended it
		return fmt.Errorf("advmigrate: the migration failed after the lock %q was lost: %w", d.name, errors.Join(err, l.Err()))
	}
	return err
}

// SetVersion records version and dirty with the wrapped driver. After a loss it refuses
// all but the record of a migration that has run to its end (dirty false right after a
// Run that succeeded): the migration has committed, and the record stays true.
func (d *Driver) SetVersion(version int, dirty bool) error {
	d.mu.Lock()
	done := !dirty && d.ranOK
	d.ranOK = false
	d.mu.Unlock()
	if !done {
		if err := d.check("set the version"); err != nil {
			return err
		}
	}
	return d.inner.SetVersion(version, dirty)
}

// Version returns the wrapped driver's version; it needs no lock.
func (d *Driver) Version() (int, bool, error) { return d.inner.Version() }

// Drop drops everything with the wrapped driver, unless the current holding was lost.
func (d *Driver) Drop() error {
	if err := d.check("drop"); err != nil {
		return err
	}
	return d.inner.Drop()
}

// check refuses op when the current holding was lost; outside a holding (migrate's
// Version, a caller's own calls) it lets everything through, as the wrapped driver would.
func (d *Driver) check(op string) error {
	d.mu.Lock()
	l := d.l
	d.mu.Unlock()
	if l == nil {
		return nil
	}
	if err := l.Err(); err != nil {
		return fmt.Errorf("advmigrate: %s refused, the lock %q is no longer held: %w", op, d.name, err)
	}
	return nil
}

// take ends the holding and returns its Lock, nil if none; d.mu is held.
func (d *Driver) take() *advisory.Lock {
	l := d.l
	d.l, d.ranOK = nil, false
	return l
}

// release unlocks l, bounded by unlockTimeout.
func release(l *advisory.Lock) error {
	ctx, cancel := context.WithTimeout(context.Background(), unlockTimeout)
	defer cancel()
	return l.Unlock(ctx)
}
