package pgtest

import (
	"context"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// startLocal starts a cluster from the local binaries (package pglocal, which the
// pgadvisory demo shares without linking this package's container code).
func startLocal(ctx context.Context, opts Options) (*Server, error) {
	c, err := pglocal.Start(ctx, pglocal.Options{ListenAddresses: opts.ListenAddresses, TrustCIDRs: opts.TrustCIDRs,
		Settings: opts.Settings})
	if err != nil {
		return nil, err
	}
	return localServer(c, "local"), nil
}

func localServer(c *pglocal.Cluster, kind string) *Server {
	return &Server{dsn: c.DSN(), kind: kind, port: c.Port(), restart: c.Restart, crash: c.Crash, stop: c.Close}
}
