package pgtest

import (
	"context"
	"fmt"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// containerImage is the image the harness runs when a Docker engine answers.
const containerImage = "postgres:16-alpine"

// startContainer runs PostgreSQL in a container. Without a Docker engine it fails at once.
func startContainer(ctx context.Context) (srv *Server, err error) {
	defer func() {
		// testcontainers panics in some set-ups without a Docker engine; treat that as "not available".
		if r := recover(); r != nil {
			srv, err = nil, fmt.Errorf("%v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, err := tcpostgres.Run(ctx, containerImage,
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		testcontainers.WithWaitStrategy(wait.ForLog("database system is ready to accept connections").
			WithOccurrence(2).WithStartupTimeout(2*time.Minute)),
	)
	if err != nil {
		if c != nil {
			testcontainers.TerminateContainer(c)
		}
		return nil, err
	}
	dsn, err := c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		testcontainers.TerminateContainer(c)
		return nil, err
	}
	restart := func(ctx context.Context) error {
		timeout := 10 * time.Second
		if err := c.Stop(ctx, &timeout); err != nil {
			return err
		}
		if err := c.Start(ctx); err != nil {
			return err
		}
		// The mapped port may change across a restart.
		dsn2, err := c.ConnectionString(ctx, "sslmode=disable")
		if err != nil {
			return err
		}
		srv.dsn = dsn2
		return nil
	}
	srv = &Server{dsn: dsn, kind: "testcontainers", restart: restart,
		stop: func() error { return testcontainers.TerminateContainer(c) }}
	return srv, nil
}
