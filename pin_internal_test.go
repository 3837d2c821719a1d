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
