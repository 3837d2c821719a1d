package advisorytest_test

import (
	"errors"
	"testing"

	"github.com/pgadvisory/advisory"
	"github.com/pgadvisory/advisory/advisorytest"
)

// testMigrationLockIsExclusive is a test of your own: a fresh database from
// advisorytest.DSN, a Manager on it, and assertions about the real server's locks.
func testMigrationLockIsExclusive(t *testing.T) {
	dsn := advisorytest.DSN(t)
	ctx := t.Context()
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	l, err := m.Lock(ctx, "migrations")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := m.TryLock(ctx, "migrations"); !errors.Is(err, advisory.ErrLocked) {
		t.Fatalf("TryLock while held: got %v, want ErrLocked", err)
	}
	if err := l.Unlock(ctx); err != nil {
		t.Fatal(err)
	}
}

// Example shows the shape of a test that uses advisorytest. An example cannot take a
// *testing.T, so the test itself is testMigrationLockIsExclusive above; in your own code
// it is a TestXxx function:
//
//	func TestMigrationLockIsExclusive(t *testing.T) {
//		t.Parallel()
//		dsn := advisorytest.DSN(t)
//		...
//	}
//
// advisorytest's own tests run it against a real server.
func Example() {
	_ = testMigrationLockIsExclusive
}
