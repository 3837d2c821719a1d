package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strings"
)

// confirm asks on stderr and reads one line from stdin, which must be a terminal: a
// script that pipes "yes" into break has not looked at what it terminates, so without a
// terminal it must say --yes. "y" or "yes" (any case) goes on; anything else, or end of
// input, declines (exit 4). A signal ends the wait for an answer (ctx).
func (b *breaker) confirm(ctx context.Context, stdin *os.File, n int) error {
	if !isTerminal(stdin) {
		return fail(exitNoConfirm, "break: refusing to terminate without confirmation: standard input is not a "+
			"terminal to ask on; run it on a terminal, or add --yes to terminate without asking")
	}
	what := "this backend"
	if n > 1 {
		what = fmt.Sprintf("these %d backends (every holder of the shared lock)", n)
	}
	fmt.Fprintf(b.stderr, "Terminate %s with pg_terminate_backend? [y/N] ", what)
	answer := make(chan string, 1)
	go func() { // left blocked on a read if a signal comes first: the process is ending
		line, _ := bufio.NewReader(stdin).ReadString('\n')
		answer <- line
	}()
	select {
	case <-ctx.Done():
		fmt.Fprintln(b.stderr)
		return ctx.Err()
	case line := <-answer:
		switch strings.ToLower(strings.TrimSpace(line)) {
		case "y", "yes":
			return nil
		}
		return fail(exitDeclined, "break: not confirmed; nothing was terminated")
	}
}
