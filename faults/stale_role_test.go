package faults_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgadvisory/advisory"
)

// staleTable receives the writes of TestStaleHolderWritesAreRefused: one row per write
// that committed, with the writer's path and the token it carried.
const staleTable = "stale_writes"

// Writer names in staleTable: A's three paths and B.
const (
	writerTx      = "A-begin-func"  // A through Lock.BeginFunc on its own lock's connection
	writerToken   = "A-check-token" // A on a plain connection, after Manager.CheckToken
	writerPlain   = "A-unfenced"    // A on a plain connection, no check: the control
	writerCurrent = "B"             // the current holder
)

// runStaleHolder is holder A of the stale-holder test. It takes the lock named
// $ADVISORY_FAULT_KEY and its fencing token, opens a plain connection, and prints
// "READY <backend pid> <token>". It then blocks until a line arrives on stdin (the test
// writes it while A is stopped, so A reads it the moment it is resumed) and at once
// attempts all three writes, whatever Err() says, printing
// "RESULT <loss seen before writing> <tx> <token> <plain>", each path classified by
// classify, then a DETAIL line per error.
func runStaleHolder() int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dsn, name := os.Getenv("ADVISORY_FAULT_DSN"), os.Getenv("ADVISORY_FAULT_KEY")
	trial, _ := strconv.Atoi(os.Getenv("ADVISORY_FAULT_TRIAL"))
	m, err := advisory.New(ctx, dsn)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer m.Close()
	l, err := m.Lock(ctx, name)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	tok, err := l.Token(ctx)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	plain, err := pgx.Connect(ctx, dsn)
	if err != nil {
		fmt.Println("ERROR", err)
		return 1
	}
	defer plain.Close(context.Background())
	fmt.Println("READY", l.PID(), tok)
	if !bufio.NewScanner(os.Stdin).Scan() {
		fmt.Println("ERROR no write signal on stdin")
		return 1
	}
	seen := l.Err() != nil // whether the watcher won the race with the write
	insert := func(ctx context.Context, tx pgx.Tx, writer string) error {
		_, err := tx.Exec(ctx, "INSERT INTO "+staleTable+" (trial, writer, token) VALUES ($1, $2, $3)",
			trial, writer, tok)
		return err
	}
	txErr := l.BeginFunc(ctx, func(tx pgx.Tx) error { return insert(ctx, tx, writerTx) })
	tokErr := pgx.BeginFunc(ctx, plain, func(tx pgx.Tx) error {
		if err := m.CheckToken(ctx, tx, name, tok); err != nil {
			return err
		}
		return insert(ctx, tx, writerToken)
	})
	plainErr := pgx.BeginFunc(ctx, plain, func(tx pgx.Tx) error { return insert(ctx, tx, writerPlain) })
	fmt.Println("RESULT", seen, classify(txErr), classify(tokErr), classify(plainErr))
	for path, err := range map[string]error{"tx": txErr, "token": tokErr, "plain": plainErr} {
		if err != nil {
			fmt.Printf("DETAIL %s %q\n", path, err.Error())
		}
	}
	return 0
}

// classify names the kind of a write's error: "ok" (committed), "lost" (ErrLockLost),
// "stale" (ErrStaleToken) or "other".
func classify(err error) string {
	switch {
	case err == nil:
		return "ok"
	case errors.Is(err, advisory.ErrLockLost):
		return "lost"
	case errors.Is(err, advisory.ErrStaleToken):
		return "stale"
	}
	return "other"
}
