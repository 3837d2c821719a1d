package advisorytest

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// createDatabase creates the database name (letters, digits and '_' only) on the server
// at dsn.
func createDatabase(ctx context.Context, dsn, name string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("connect to the test server: %w", err)
	}
	defer conn.Close(context.Background())
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) && pe.Code == "42501" {
			return fmt.Errorf("create database %s: %w (the role of %s needs CREATEDB)", name, err, EnvDSN)
		}
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// dropDatabase terminates the sessions still connected to name, then drops it. It retries
// while a session is still going away (SQLSTATE 55006) until ctx ends. DROP DATABASE ...
// WITH (FORCE) would do both, but only from PostgreSQL 13.
func dropDatabase(ctx context.Context, dsn, name string) error {
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		return fmt.Errorf("drop database %s: connect: %w", name, err)
	}
	defer conn.Close(context.Background())
	for {
		_, err := conn.Exec(ctx, `SELECT pg_catalog.pg_terminate_backend(pid) FROM pg_catalog.pg_stat_activity
			WHERE datname OPERATOR(pg_catalog.=) $1 AND pid OPERATOR(pg_catalog.<>) pg_catalog.pg_backend_pid()`, name)
		if err == nil {
			_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name)
		}
		var pe *pgconn.PgError
		if err == nil || !errors.As(err, &pe) || pe.Code != "55006" {
			if err != nil {
				return fmt.Errorf("drop database %s: %w", name, err)
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("drop database %s: %w", name, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}
