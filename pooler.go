package advisory

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory/internal/sockfd"
)

// Keys of a connection's PgConn.CustomData set by its setup (see setup.go): the backend
// pid as pg_backend_pid() reported it (a proxy answers the startup with a BackendKeyData
// of its own, so PgConn.PID is not to be trusted for this), the ownership token, and the
// socket's descriptor (see connFD), the database's oid (see workTag), and, only on a connection that goes straight to its
// backend (see look.directPath), directKey.
const (
	backendPIDKey = "advisory.backendPID"
	tokenKey      = "advisory.token"
	fdKey         = "advisory.fd"
	directKey     = "advisory.direct"
	dbOIDKey      = "advisory.dbOID"
)

// isDirect reports whether the connection was found at setup to go straight to its
// backend, with no proxy or address translation between.
func isDirect(pg *pgconn.PgConn) bool {
	d, _ := pg.CustomData()[directKey].(bool)
	return d
}

// connFD returns the descriptor of the connection's socket (-1 if it has none), found
// once at setup: a connection keeps its socket for life, and asking the runtime for it
// on every Lock cost two allocations.
func connFD(pg *pgconn.PgConn) int {
	if fd, ok := pg.CustomData()[fdKey].(int); ok {
		return fd
	}
	return sockfd.FD(pg.Conn())
}

func ownership(pg *pgconn.PgConn) (pid uint32, token string) {
	pid, ok := pg.CustomData()[backendPIDKey].(uint32)
	if !ok {
		pid = pg.PID()
	}
	token, _ = pg.CustomData()[tokenKey].(string)
	return pid, token
}

// isPoolerSymptom reports the errors pgx's prepared statements meet behind a
// transaction-pooling proxy: a statement prepared on this very connection vanished
// (26000), or one of the same name already exists (42P05) because another client
// prepared it on the same backend.
func isPoolerSymptom(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "26000" || pgErr.Code == "42P05")
}

// checkBackend fails the session loudly, and closes its connection, if a lock statement
// ran on a backend other than the connection's own (owned is nil: the statement did
// nothing there, see ownedBy) or hit a prepared-statement symptom. It never unlocks
// anything on a backend that is not the connection's own: that lock would be someone
// else's. Other errors are left to the caller.
func (s *pin) checkBackend(pid uint32, owned *bool, err error) error {
	switch {
	case err == nil:
		if perr := s.checkOwned(pid, owned); perr != nil {
			s.discard()
			return perr
		}
	case isPoolerSymptom(err):
		s.discard()
		return fmt.Errorf("%w: a statement prepared on this connection met another client's on the server: %w", ErrPooler, err)
	}
	return nil
}

// checkOwned returns nil if a statement that returned (pid, owned) ran on the
// connection's own backend.
func (s *pin) checkOwned(pid uint32, owned *bool) error {
	switch {
	case owned == nil && pid == s.pid:
		return fmt.Errorf("%w: the connection's backend (pid %d) no longer carries its ownership token: "+
			"another client's statements ran there", ErrPooler, pid)
	case owned == nil || pid != s.pid:
		return fmt.Errorf("%w: the connection's backend is pid %d but the statement ran on pid %d, "+
			"which belongs to another client; it did nothing there", ErrPooler, s.pid, pid)
	}
	return nil
}

// foreignError is the error of a clean-up statement that ran on another client's backend.
func (s *pin) foreignError() error {
	return fmt.Errorf("%w: a statement of the connection (backend pid %d) ran on another client's backend; "+
		"it did nothing there", ErrPooler, s.pid)
}
