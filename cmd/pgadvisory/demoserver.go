package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory/internal/pglocal"
)

// The demo finds its server the way the test harness (internal/pgtest) does, in the same
// order, but without linking testcontainers and the Docker client, which would triple the
// size of a binary meant for init containers: a container is run with the docker CLI, and
// a local cluster comes from package pglocal, which pgtest uses too.

// demoEnvDSN is pgtest.EnvDSN: an existing server for the demo, as for the tests.
const demoEnvDSN = "ADVISORY_TEST_DSN"

// demoImage is the image the demo runs when the docker CLI reaches an engine (the one the
// test harness runs through testcontainers).
const demoImage = "postgres:16-alpine"

// demoServer is the demo's PostgreSQL and how to get rid of it.
type demoServer struct {
	dsn   string
	kind  string
	close func() error
}

// startDemoServer returns a server from the first source that works: ADVISORY_TEST_DSN, a
// container run with the docker CLI (skipped when ADVISORY_TEST_PGBIN asks for given
// binaries), local binaries. say reports progress. The error lists why each source failed.
func startDemoServer(ctx context.Context, say func(string)) (*demoServer, error) {
	if dsn := strings.TrimSpace(os.Getenv(demoEnvDSN)); dsn != "" {
		return &demoServer{dsn: dsn, kind: demoEnvDSN, close: func() error { return nil }}, nil
	}
	var reasons []string
	if strings.TrimSpace(os.Getenv(pglocal.EnvPGBin)) == "" {
		if _, err := exec.LookPath("docker"); err != nil {
			reasons = append(reasons, "docker: no docker command in PATH")
		} else if !dockerEngineAnswers(ctx) {
			reasons = append(reasons, "docker: no Docker engine answers (docker info failed)")
		} else {
			say("starting " + demoImage + " with the docker CLI (the first run pulls the image)...")
			srv, err := startDockerServer(ctx)
			if err == nil {
				return srv, nil
			}
			if ctx.Err() != nil {
				return nil, err // Ctrl-C: the container is gone; start nothing else
			}
			reasons = append(reasons, "docker: "+err.Error())
			say("no container: " + err.Error())
		}
	}
	say("starting a throwaway cluster from the local PostgreSQL binaries...")
	c, err := pglocal.Start(ctx, pglocal.Options{})
	if err == nil {
		return &demoServer{dsn: c.DSN(), kind: "local binaries", close: c.Close}, nil
	}
	reasons = append(reasons, "local binaries: "+err.Error())
	return nil, errors.New(strings.Join(reasons, "; "))
}

// startDockerServer runs demoImage detached, publishes its port on 127.0.0.1 only, and
// waits until it accepts connections. The container has a unique name, so that it can be
// removed even when ctx ended (Ctrl-C) before docker run printed its id. On error the
// container is removed.
func startDockerServer(ctx context.Context) (*demoServer, error) {
	name := fmt.Sprintf("pgadvisory-demo-%d-%d", os.Getpid(), time.Now().UnixNano())
	remove := func() error { return dockerRemove(name) }
	srv, err := runDockerServer(ctx, name)
	if err != nil {
		remove() // an error here means there was nothing to remove
		return nil, err
	}
	srv.close = remove
	return srv, nil
}

func runDockerServer(ctx context.Context, name string) (*demoServer, error) {
	if _, err := docker(ctx, "run", "-d", "--rm", "--name", name, "-p", "127.0.0.1::5432",
		"-e", "POSTGRES_HOST_AUTH_METHOD=trust", demoImage); err != nil {
		return nil, err
	}
	out, err := docker(ctx, "port", name, "5432/tcp")
	if err != nil {
		return nil, err
	}
	first, _, _ := strings.Cut(out, "\n")
	host, port, err := net.SplitHostPort(strings.TrimSpace(first))
	if err != nil {
		return nil, fmt.Errorf("docker port %s printed %q: %w", name, out, err)
	}
	dsn := fmt.Sprintf("host=%s port=%s user=postgres dbname=postgres sslmode=disable", host, port)
	if err := waitAccepting(ctx, dsn, 2*time.Minute); err != nil {
		return nil, fmt.Errorf("container %s (%s:%s): %w", name, host, port, err)
	}
	return &demoServer{dsn: dsn, kind: "docker " + demoImage + ", container " + name}, nil
}

// docker runs the docker CLI and returns its trimmed stdout; the first line of its stderr
// goes into the error.
func docker(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, "docker", args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	cmd.WaitDelay = 5 * time.Second
	out, err := cmd.Output()
	if err != nil {
		msg, _, _ := strings.Cut(strings.TrimSpace(stderr.String()), "\n") // the rest is "Run 'docker run --help'"
		return "", fmt.Errorf("docker %s: %w: %s", args[0], err, msg)
	}
	return strings.TrimSpace(string(out)), nil
}

// dockerRemove removes the container, bounded by 30 s: not by the demo's context, which a
// Ctrl-C has ended by the time the container must go.
func dockerRemove(name string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := docker(ctx, "rm", "-f", name)
	return err
}

// waitAccepting polls until a connection to dsn succeeds, bounded by limit and ctx. The
// image's entrypoint runs its set-up on a server that does not listen on TCP, so the
// first TCP connection that succeeds is to the server that stays.
func waitAccepting(ctx context.Context, dsn string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	for {
		conn, err := pgx.Connect(ctx, dsn+" connect_timeout=2")
		if err == nil {
			return conn.Close(ctx)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("PostgreSQL not ready after %v: %w", limit, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// dockerEngineAnswers reports whether a Docker engine answers the docker CLI (within 5 s),
// so that a machine without one is not shown docker run's error first.
func dockerEngineAnswers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	return exec.CommandContext(ctx, "docker", "info", "--format", "{{.ServerVersion}}").Run() == nil
}
