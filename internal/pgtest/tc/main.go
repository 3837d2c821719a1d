// Command tc is the test harness's container step, in a module of its own so that
// testcontainers-go, the Docker client and theirs stay out of the library's go.mod, and so
// out of the go.sum of every module that imports the library (issue 46, item 7).
//
// Package pgtest builds and runs it only when a Docker engine answers. It starts
// testcontainers-go's postgres module, prints one line "dsn <connection string>" on
// stdout, and then reads commands on stdin, one a line:
//
//	restart  stop the container and start it again; answers "dsn <connection string>"
//	         (the mapped port may change) or "error <text>"
//
// When stdin closes (the harness's Close, or the test binary's exit, however it ends) it
// terminates the container and exits; testcontainers' reaper removes the container if this
// process itself is killed. A failure before the first line is printed on stderr, with
// exit status 1.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"github.com/testcontainers/testcontainers-go/wait"
)

// image is the image the harness runs when a Docker engine answers.
const image = "postgres:16-alpine"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	c, dsn, err := start(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "advisory: pgtest/tc: %v\n", err)
		os.Exit(1)
	}
	defer testcontainers.TerminateContainer(c)
	fmt.Printf("dsn %s\n", dsn)
	lines := make(chan string)
	go func() {
		defer close(lines)
		in := bufio.NewScanner(os.Stdin)
		for in.Scan() {
			lines <- strings.TrimSpace(in.Text())
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return
		case line, ok := <-lines:
			if !ok {
				return
			}
			answer(ctx, c, line)
		}
	}
}

// start runs the container and returns it with its connection string. testcontainers
// panics in some set-ups without a working engine; that is an error here too.
func start(ctx context.Context) (c *tcpostgres.PostgresContainer, dsn string, err error) {
	defer func() {
		if r := recover(); r != nil {
			c, dsn, err = nil, "", fmt.Errorf("testcontainers panicked: %v", r)
		}
	}()
	ctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	c, err = tcpostgres.Run(ctx, image,
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
		return nil, "", err
	}
	dsn, err = c.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		testcontainers.TerminateContainer(c)
		return nil, "", err
	}
	return c, dsn, nil
}

// answer runs one command from stdin and prints its one-line answer.
func answer(ctx context.Context, c *tcpostgres.PostgresContainer, cmd string) {
	switch cmd {
	case "restart":
		dsn, err := restart(ctx, c)
		if err != nil {
			fmt.Printf("error %s\n", strings.ReplaceAll(err.Error(), "\n", " "))
			return
		}
		fmt.Printf("dsn %s\n", dsn)
	default:
		fmt.Printf("error unknown command %q\n", cmd)
	}
}

// restart stops the container (the server's fast shutdown terminates its sessions) and
// starts it again; the mapped port may change, so it returns the new connection string.
func restart(ctx context.Context, c *tcpostgres.PostgresContainer) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	timeout := 10 * time.Second
	if err := c.Stop(ctx, &timeout); err != nil {
		return "", err
	}
	if err := c.Start(ctx); err != nil {
		return "", err
	}
	return c.ConnectionString(ctx, "sslmode=disable")
}
