package pgtest

import (
	"context"
	"errors"
	"net"
	"sync/atomic"

	"github.com/jackc/pgx/v5/pgconn"
)

// errNoCancel is what a NoCancel dial function returns after its first dial.
var errNoCancel = errors.New("pgtest: this connection sends no cancel request")

// NoCancel wraps dial (nil: a plain net.Dialer) for one connection: its first call dials,
// every later call fails at once. pgconn dials again only to send a CancelRequest (when a
// ctx ends during a statement, and when it closes a connection after an error), so a
// connection made with it never sends one. Through PgBouncer 1.18 a cancel request
// abandoned before PgBouncer forwarded it crashes PgBouncer (pgbouncer issue 801), and a
// fault test must not crash the pooler it measures. Use a new wrapper for each
// connection ([pgconn.ConnectConfig], [pgx.ConnectConfig]), never for a pool's config,
// and a connection string that dials once to connect: one host, sslmode=disable (as
// [PgBouncer.DSN]'s).
func NoCancel(dial pgconn.DialFunc) pgconn.DialFunc {
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	var dialled atomic.Bool
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		if dialled.Swap(true) {
			return nil, errNoCancel
		}
		return dial(ctx, network, addr)
	}
}
