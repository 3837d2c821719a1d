package advisory

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/jackc/pgx/v5/pgconn"
)

// backendPIDKey is where a connection's backend pid, as pg_backend_pid() reported it when
// the connection was set up, is kept in PgConn.CustomData. A proxy answers the startup
// with a BackendKeyData of its own, so PgConn.PID is not to be trusted for this.
const backendPIDKey = "advisory.backendPID"

func recordBackendPID(pg *pgconn.PgConn, results []*pgconn.Result) error {
	last := results[len(results)-1]
	if len(last.Rows) != 1 || len(last.Rows[0]) != 1 {
		return errors.New("advisory: set up lock session: no pg_backend_pid() result")
	}
	pid, err := strconv.ParseUint(string(last.Rows[0][0]), 10, 32)
	if err != nil {
		return fmt.Errorf("advisory: set up lock session: pg_backend_pid(): %w", err)
	}
	pg.CustomData()[backendPIDKey] = uint32(pid)
	return nil
}

func backendPID(pg *pgconn.PgConn) uint32 {
	if pid, ok := pg.CustomData()[backendPIDKey].(uint32); ok {
		return pid
	}
	return pg.PID()
}

// isPoolerSymptom reports SQLSTATE 26000 for a statement pgx prepared on this very
// connection: it vanished between two statements, as it does when a transaction-pooling
// proxy sends them to different backends.
func isPoolerSymptom(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "26000"
}

// checkBackend fails the session loudly if the lock statement ran on a backend other than
// the connection's own, or hit the prepared-statement symptom. The lock may then be held
// by that other backend: one unlock is tried there (best effort), and the connection is
// closed.
func (s *session) checkBackend(pid uint32, err error) error {
	if err == nil && pid == s.pid {
		return nil
	}
	if err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		s.pc.Exec(ctx, s.st.unlock, int64(s.key))
		s.discard()
		return s.poolerError(pid)
	}
	s.discard()
	return fmt.Errorf("%w: a statement prepared on this connection vanished: %w", ErrPooler, err)
}

func (s *session) poolerError(pid uint32) error {
	return fmt.Errorf("%w: the connection's backend is pid %d but the statement ran on pid %d "+
		"(if the lock is still held there: SELECT pg_terminate_backend(%d))", ErrPooler, s.pid, pid, pid)
}
