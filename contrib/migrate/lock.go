package advmigrate

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/golang-migrate/migrate/v4/database"

	"github.com/pgadvisory/advisory"
)

// drainTimeout bounds the drain Lock runs once it holds the lock (a drain ends within its
// drain wait and 10 s more; see docs/work.md).
const drainTimeout = 30 * time.Second

// errClosed is returned by a Lock on a closed Driver.
var errClosed = errors.New("advmigrate: the driver is closed")

// Lock takes the advisory lock, waiting at most the wrapper's wait ([WithWait], 10 s by
// default); a wait that ends is cancelled on the server and leaves nothing held or
// queued. Holding it, Lock drains the sessions of earlier holders' work (see
// [advisory.Lock.Drain]) and tags the wrapped driver's session as this holding's work
// (application_name and the settings of [advisory.Lock.WorkOptions], set with a
// statement run through the driver's Run; behind a transaction pooler each migration's own
// transaction instead, see [Driver.Run]), so that a later holder drains it if this
// process dies mid-migration; with [WithRecoverDirty] it then mends a dirty version. On
// any error nothing is held. A second Lock before Unlock returns database.ErrLocked, as
// the drivers do.
//
// migrate waits for Lock at most its LockTimeout (15 s by default) and then gives up
// without calling Unlock: keep LockTimeout longer than the wrapper's wait. If it is
// shorter, a lock taken after migrate gave up stays held until [Driver.Close].
func (d *Driver) Lock() error {
	d.mu.Lock()
	if d.closed || d.l != nil || d.locking {
		closed := d.closed
		d.mu.Unlock()
		if closed {
			return errClosed
		}
		return database.ErrLocked
	}
	d.locking = true
	d.mu.Unlock()
	l, err := d.hold()
	d.mu.Lock()
	d.locking = false
	closed := d.closed
	if err == nil && !closed {
		d.l, d.ranOK = l, false
	}
	d.mu.Unlock()
	if err == nil && closed { // Close ran while Lock waited
		release(l)
		err = errClosed
	}
	return err
}

// hold takes the lock, tags the driver's session, drains and recovers; on error nothing
// is held and the session is untagged. The tag comes before the drain: a session still
// tagged from an earlier holding of this driver (an untag that failed) is then this
// holding's, and the drain leaves it alone instead of ending the driver's connection.
func (d *Driver) hold() (*advisory.Lock, error) {
	ctx, cancel := context.WithTimeout(context.Background(), d.o.wait)
	defer cancel()
	l, err := d.m.Lock(ctx, d.name)
	if err != nil {
		return nil, fmt.Errorf("advmigrate: lock %q: %w", d.name, err)
	}
	if err := d.tag(l); err != nil {
		release(l)
		return nil, fmt.Errorf("advmigrate: lock %q: tag the migration's session: %w", d.name, err)
	}
	dctx, dcancel := context.WithTimeout(context.Background(), drainTimeout)
	defer dcancel()
	if _, err := l.Drain(dctx); err != nil {
		d.abandon(l)
		return nil, fmt.Errorf("advmigrate: lock %q: an earlier holder's migration may still run: %w", d.name, err)
	}
	if err := d.recoverDirty(); err != nil {
		d.abandon(l)
		return nil, fmt.Errorf("advmigrate: lock %q: recover a dirty version: %w", d.name, err)
	}
	return l, nil
}

// abandon untags the driver's session (best effort: else the next holder ends it) and
// releases l.
func (d *Driver) abandon(l *advisory.Lock) {
	if !d.pooled() {
		d.inner.Run(strings.NewReader(untagSQL))
	}
	release(l)
}

// tag tags the driver's session for l (tagSQL), unless the Manager goes through a
// transaction pooler, where the driver's connection is no server session of its own: a
// session setting there would stay on a server session other clients get next (and a
// later drain would end their work as this holding's). Each migration is tagged in its
// own transaction instead (see Driver.Run).
func (d *Driver) tag(l *advisory.Lock) error {
	if d.pooled() {
		return nil
	}
	return d.inner.Run(strings.NewReader(tagSQL(l)))
}

// pooled reports whether the Manager goes through a transaction pooler.
func (d *Driver) pooled() bool { return d.m.Bounds().TransactionPooler }

// recoverDirty sets a dirty version to the one before it (WithRecoverDirty).
func (d *Driver) recoverDirty() error {
	if d.o.recover == nil {
		return nil
	}
	v, dirty, err := d.inner.Version()
	if err != nil || !dirty {
		return err
	}
	prev := database.NilVersion
	if p, err := d.o.recover.Prev(uint(v)); err == nil {
		prev = int(p)
	} else if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return d.inner.SetVersion(prev, false)
}

// Unlock gives the wrapped driver's session its own application_name back and releases
// the lock, bounded by 5 s (past it the lock's connection is closed, which frees the lock
// too). It returns database.ErrNotLocked if the lock is not held, and otherwise nil, also
// after a loss or a failed release: the holding has ended either way, and migrate keeps
// its own "locked" flag set when Unlock fails, so that every later call of the Migrate
// would fail with ErrLocked although nothing is held. A loss is reported by the call it
// refused ([Driver.Run], [Driver.SetVersion], [Driver.Drop]) and by a Run that failed
// after it; a loss after the last migration was recorded changed nothing, and the
// Manager's logger ([advisory.WithLogger]) records it.
//
// The session is untagged after a loss too: migrate calls Unlock when its last statement
// has returned, so the session runs no work of the lost holding that a later holder
// should drain, and a Lock of the same Driver finds it untagged.
func (d *Driver) Unlock() error {
	d.mu.Lock()
	l := d.take()
	d.mu.Unlock()
	if l == nil {
		return database.ErrNotLocked
	}
	d.abandon(l) // untagged first: the next holder must not end an idle session
	return nil
}

// tagSQL sets application_name to the holding's tag followed by the session's own name,
// and the work settings, on the session that runs it.
func tagSQL(l *advisory.Lock) string {
	var b strings.Builder
	b.WriteString("SELECT pg_catalog.set_config('application_name', pg_catalog.rtrim(pg_catalog.concat(" +
		literal(l.WorkAppName("")) + ", ' ', pg_catalog.current_setting('application_name'))), false)")
	f := strings.Fields(l.WorkOptions()) // "-c name=value ..."
	for i := 0; i+1 < len(f); i += 2 {
		if k, v, ok := strings.Cut(f[i+1], "="); f[i] == "-c" && ok {
			b.WriteString(", pg_catalog.set_config(" + literal(k) + ", " + literal(v) + ", false)")
		}
	}
	return b.String()
}

// untagSQL gives the session the application_name it started with.
const untagSQL = "SELECT pg_catalog.set_config(name, reset_val, false) FROM pg_catalog.pg_settings " +
	"WHERE name OPERATOR(pg_catalog.=) 'application_name'"

// literal quotes s as an escape string constant, whatever standard_conforming_strings is.
func literal(s string) string {
	return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
}
