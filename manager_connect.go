package advisory

import (
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory/internal/connstr"
)

// minServerVersion is the oldest PostgreSQL the library supports, as serverVersion
// numbers it: 12 is the first with tcp_user_timeout.
const minServerVersion = 120000

// checkVersion returns the server's version number (see serverVersion) or an error
// wrapping ErrUnsupportedServer for one older than 12. A version it cannot read (a proxy
// may report its own) passes: the setup statement then fails clearly if it must.
func checkVersion(reported string) (int, error) {
	version := serverVersion(reported)
	if version != 0 && version < minServerVersion {
		return 0, fmt.Errorf("%w: PostgreSQL %s; the minimum is 12 (lock connections set tcp_user_timeout, "+
			"which PostgreSQL 12 introduced)", ErrUnsupportedServer, reported)
	}
	return version, nil
}

// setupError explains a failure of the statement that sets up a lock connection.
func setupError(err error, serverVersion string) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42704" { // undefined_object: an unknown setting
		return fmt.Errorf("advisory: set up lock session: PostgreSQL %s rejected a setting every lock connection "+
			"needs (keepalive and timeouts, see docs/keepalive.md): %w", serverVersion, err)
	}
	return fmt.Errorf("advisory: set up lock session: %w", err)
}

// connectError explains New's failure to open its first connection. pgx sends every
// connection-string key it does not know to the server as a setting; the server then
// refuses the connection with "unrecognized configuration parameter": say which key
// and why. The password is scrubbed from the text, whatever pgx put in it.
func connectError(err error, cfg *pgxpool.Config) error {
	secrets := []string{cfg.ConnConfig.Password}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42704" && pgErr.Severity == "FATAL" {
		for key := range cfg.ConnConfig.RuntimeParams {
			if strings.Contains(pgErr.Message, `"`+key+`"`) {
				return &scrubbed{fmt.Errorf("advisory: connect: the connection string's key %q is neither a libpq "+
					"connection setting pgx knows nor a server setting: pgx sent it to the server, which refused it: %w",
					key, err), secrets}
			}
		}
	}
	return &scrubbed{fmt.Errorf("advisory: connect: %w", err), secrets}
}

// scrubbed is an error whose text has the given secrets masked. It unwraps to the
// original error, so *pgconn.PgError and the sentinels stay reachable.
type scrubbed struct {
	err     error
	secrets []string
}

func (e *scrubbed) Error() string { return connstr.Scrub(e.err.Error(), e.secrets) }
func (e *scrubbed) Unwrap() error { return e.err }
