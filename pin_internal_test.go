package advisory

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestUnlockFailureAfterAFatalIsALoss: an unlock that met the server's FATAL (the session
// terminated) while its ctx also ended is a loss, not a ctx error (TestModel found an
// Unlock racing pg_terminate_backend reported as a plain failure).
func TestUnlockFailureAfterAFatalIsALoss(t *testing.T) {
	s := &pin{key: 7, m: &Manager{}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	fatal := &pgconn.PgError{Severity: "FATAL", Code: "57P01", Message: "terminating connection due to administrator command"}
	err, lost := s.unlockFailure(ctx, fatal)
	if !lost || !errors.Is(err, ErrLockLost) {
		t.Fatalf("unlockFailure(cancelled ctx, FATAL) = %v, lost %v; want a loss", err, lost)
	}
}

// TestUnlockDuringCloseReportsTheLoss: an Unlock that finds the Manager's Close releasing
// the lock reports what Close makes of it (ErrLockLost, ErrClosed), not ErrNotHeld, which
// means "you unlocked it already" (TestModel: a live lock's Unlock racing Manager.Close).
func TestUnlockDuringCloseReportsTheLoss(t *testing.T) {
	s := &pin{key: 7, m: &Manager{}, state: stateReleasing, closing: true}
	err := s.release(context.Background(), ErrNotHeld)
	if !errors.Is(err, ErrLockLost) || !errors.Is(err, ErrClosed) {
		t.Fatalf("release during Close = %v; want the loss Close reports", err)
	}
	s = &pin{key: 7, m: &Manager{}, state: stateReleasing}
	if err := s.release(context.Background(), ErrNotHeld); err != ErrNotHeld {
		t.Fatalf("release during another Unlock = %v; want ErrNotHeld", err)
	}
}
