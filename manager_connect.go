package advisory

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgadvisory/advisory/internal/cancelreq"
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
	if sqlState(err) == "42704" { // undefined_object: an unknown setting
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
	if errors.Is(err, ErrPooler) || errors.Is(err, ErrStandby) || errors.Is(err, ErrUnsupportedServer) {
		return &scrubbed{err, secrets} // the set-up connected, and says what it found
	}
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
	return &scrubbed{&causeError{"advisory: connect", err}, secrets}
}

// scrubbed is an error whose text has the given secrets masked. It unwraps to the
// original error, so *pgconn.PgError and the sentinels stay reachable.
type scrubbed struct {
	err     error
	secrets []string
}

func (e *scrubbed) Error() string { return connstr.Scrub(e.err.Error(), e.secrets) }
func (e *scrubbed) Unwrap() error { return e.err }

// parseError reports a connection string pgx could not parse, with every password
// masked. The string is shown as our redactor masks it, never as pgx's text has it: pgx
// masks by pattern ("password=" up to a space), which leaves the rest of a quoted password
// with a space in it for all to see. Only pgx's reason is kept, scrubbed of every
// password the string may hold.
func parseError(connString string, err error) error {
	reason := err.Error()
	if i := strings.LastIndex(reason, "`: "); i >= 0 {
		reason = reason[i+len("`: "):]
	}
	return fmt.Errorf("%w: connection string `%s`: %s", ErrInvalidOption, connstr.Redact(connString),
		connstr.Scrub(reason, connstr.Secrets(connString)))
}

// defaultApplicationName is "PROGRAM HOST/PID", shortened at the program's name to fit
// PostgreSQL's 63-byte limit, so that the part that tells holders apart survives.
func defaultApplicationName() string {
	host, err := os.Hostname()
	if err != nil {
		host = "?"
	}
	tail := " " + host + "/" + strconv.Itoa(os.Getpid())
	prog := filepath.Base(os.Args[0])
	if room := 63 - len(tail); len(prog) > room {
		prog = strings.ToValidUTF8(prog[:max(room, 0)], "")
	}
	name := prog + tail
	if len(name) > 63 {
		name = name[len(name)-63:]
	}
	return name
}

// configure sets cfg up for lock connections, and returns it: the dialer with keepalive,
// cancel connections kept open until the server has answered (see cancelreq.Cancels),
// the cancel handler, the notice recorder, the set-up of each new connection (setUp) and
// the pool's health check.
func configure(cfg *pgxpool.Config, set *settings, ps *proxyState) *pgxpool.Config {
	cc := cfg.ConnConfig
	if cc.ConnectTimeout == 0 {
		cc.ConnectTimeout = 10 * time.Second
	}
	cc.DialFunc = ps.cancels.Dial(keepaliveDialer(cc.DialFunc, set.clientKeepalive))
	cc.AfterNetConnect = markMain(&ps.cancels, cc.AfterNetConnect)
	cc.BuildContextWatcherHandler = newCancelHandler(set.cancelGrace)
	cc.OnNotice = noticeRecorder(cc.OnNotice)
	cfg.ShouldPing = pingDead(cfg.ShouldPing)
	next := cfg.AfterConnect
	cfg.AfterConnect = func(ctx context.Context, conn *pgx.Conn) error {
		if err := setUp(ctx, conn, set, ps); err != nil {
			return err
		}
		if next != nil {
			return next(ctx, conn)
		}
		return nil
	}
	return cfg
}

// markMain wraps next (pgconn.Config's AfterNetConnect, nil for none) so that every
// connection pgx opens is marked as one of the protocol, which under TLS is how its
// cancel connections are told from it (see cancelreq.Cancels.MarkMain).
func markMain(c *cancelreq.Cancels, next func(context.Context, *pgconn.Config, net.Conn) (net.Conn, error)) func(
	context.Context, *pgconn.Config, net.Conn) (net.Conn, error) {
	return func(ctx context.Context, cfg *pgconn.Config, conn net.Conn) (net.Conn, error) {
		c.MarkMain(conn)
		if next != nil {
			return next(ctx, cfg, conn)
		}
		return conn, nil
	}
}

// serverVersion turns a server_version like "15.18 (Debian 15.18-0+deb12u1)" into
// 150018 (and "17beta1" into 170000). It returns 0 if it cannot tell.
func serverVersion(s string) int {
	major, rest := leadingInt(s)
	minor := 0
	if strings.HasPrefix(rest, ".") {
		minor, _ = leadingInt(rest[1:])
	}
	return major*10000 + minor
}

func leadingInt(s string) (int, string) {
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	if i < 0 {
		i = len(s)
	}
	n, _ := strconv.Atoi(s[:i])
	return n, s[i:]
}

// connect opens the Manager's pool (see openPool) and decides, in the one place that
// does, every refusal of its settings (settings.check): first with what the options and
// the connection string say, before connecting; then with the path New's first connection
// found. It returns the pool, the kind of holding the Manager's locks take and the
// server's version, with the settings that depend on the path completed. On error
// nothing is left open.
func connect(ctx context.Context, cfg *pgxpool.Config, set *settings, ps *proxyState) (*pgxpool.Pool, Holding, int, error) {
	if err := set.check(nil); err != nil {
		return nil, 0, 0, err
	}
	pool, path, version, err := openPool(ctx, cfg, set, ps)
	if path != nil {
		if cerr := set.check(path); cerr != nil {
			if pool != nil {
				pool.Close()
			}
			return nil, 0, 0, cerr
		}
	}
	if err != nil {
		return nil, 0, 0, err
	}
	set.complete(path)
	ps.chosen.Store(int32(path.kind))
	ps.reportHolding(path.kind, set.heartbeat)
	return pool, path.kind, version, nil
}

// openPool opens the Manager's pool and checks the server on its first connection,
// whose set-up found out what is in the path (see setUp). It returns the pool, what that
// connection found of the path and the server's version. Behind a transaction pooler, a
// configuration in pgx's default query mode, which prepares and caches statements per
// client connection (the next transaction may run on a server session that has never
// seen them), is opened again in QueryExecModeExec: one unnamed statement per round trip.
// On error the pool is closed, and the path is set only where it decides the refusal (a
// transaction pooler's sign, met by a Manager asked for session holdings). cfg is the
// Manager's own copy.
func openPool(ctx context.Context, cfg *pgxpool.Config, set *settings, ps *proxyState) (*pgxpool.Pool, *pathSeen, int, error) {
	for {
		pool, err := pgxpool.NewWithConfig(ctx, configure(cfg.Copy(), set, ps))
		if err != nil {
			return nil, nil, 0, fmt.Errorf("advisory: %w", err)
		}
		conn, err := pool.Acquire(ctx)
		if err != nil {
			pool.Close()
			return nil, set.signPath(err), 0, connectError(err, cfg)
		}
		if ps.txPooled.Load() && cfg.ConnConfig.DefaultQueryExecMode == pgx.QueryExecModeCacheStatement {
			conn.Release()
			pool.Close()
			cfg.ConnConfig.DefaultQueryExecMode = pgx.QueryExecModeExec
			continue
		}
		kind := chooseHolding(set.holding, ps)
		version := serverVersion(conn.Conn().PgConn().ParameterStatus("server_version"))
		err = checkEnforced(ctx, conn, &cfg.ConnConfig.Config, kind, set.logger)
		conn.Release()
		var sign *poolerSign
		if errors.As(err, &sign) && ps.proxied.Load() && set.holding != HoldingSession {
			// The probe missed a transaction pooler (busy clients can hide one) and the
			// self-test met it: hold by transaction (checkEnforced took back what the
			// connection had left on the server).
			pool.Close()
			ps.noteTxPooler()
			continue
		}
		if err != nil {
			pool.Close()
			return nil, set.signPath(err), 0, err
		}
		return pool, &pathSeen{kind: kind, proxied: ps.inPath(), txPooler: ps.txPooled.Load()}, version, nil
	}
}

// signPath is the path that err, a failure of New's first connection, shows where it
// decides a refusal of the settings: a transaction pooler's sign (a *poolerSign) met by a
// Manager asked for session holdings. Otherwise nil: err stands.
func (s *settings) signPath(err error) *pathSeen {
	var sign *poolerSign
	if s.holding != HoldingSession || !errors.As(err, &sign) {
		return nil
	}
	return &pathSeen{kind: HoldingSession, proxied: true, txPooler: true, sign: sign.what}
}
