package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/pgadvisory/advisory"
)

// defaultWatch is the refresh interval of a bare --watch.
const defaultWatch = 2 * time.Second

// watchValue is --watch[=INTERVAL]: a boolean flag that may carry a duration. 0 is off.
type watchValue struct{ interval *time.Duration }

func (w watchValue) String() string {
	if w.interval == nil || *w.interval == 0 {
		return "false"
	}
	return w.interval.String()
}

func (w watchValue) Set(s string) error {
	switch s {
	case "true":
		*w.interval = defaultWatch
		return nil
	case "false":
		*w.interval = 0
		return nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	if d <= 0 {
		return errors.New("the interval must be positive")
	}
	*w.interval = d
	return nil
}

func (w watchValue) Get() any         { return *w.interval }
func (w watchValue) IsBoolFlag() bool { return true }

// statusQuery is one status listing: what to ask, how to print it.
type statusQuery struct {
	m      *advisory.Manager
	lock   *lockTarget // nil for every lock
	asJSON bool
}

// render queries the server and prints the listing on w.
func (q statusQuery) render(ctx context.Context, w io.Writer) error {
	var hs []advisory.Holder
	var err error
	if q.lock != nil {
		hs, err = q.m.HoldersKey(ctx, q.lock.key)
	} else {
		hs, err = q.m.AllHolders(ctx)
	}
	switch {
	case errors.Is(err, advisory.ErrPooler):
		return poolerError("status", "the address pgadvisory connected to", err)
	case err != nil:
		return fail(exitUnavailable, "status: %v", err)
	}
	rows := make([]statusRow, len(hs))
	for i, h := range hs {
		rows[i] = toRow(h)
	}
	if q.asJSON {
		return printJSON(w, rows)
	}
	printTable(w, rows, time.Now(), q.none())
	return nil
}

// none is what the listing says when it is empty: exactly which lock it looked for, never
// the sentence of the unfiltered listing.
func (q statusQuery) none() string {
	if q.lock == nil {
		return noLocks
	}
	return q.lock.none()
}

// watch prints the listing every interval until a signal: redrawn in place (cursor home,
// clear screen) on a terminal, as a plain block after the last one otherwise (a log, a
// pipe). Watching one lock, it also prints it as soon as its holder changes, as
// Manager.Observe reports it (a holder that announces itself, as run does, at once;
// another at the observer's re-check, every interval). A failed query is shown in its
// block and tried again at the next refresh. It ends with 128+N for signal N.
func (q statusQuery) watch(ctx context.Context, in *interrupter, interval time.Duration, stdout io.Writer) error {
	f, ok := stdout.(*os.File)
	redraw := ok && isTerminal(f) && !q.asJSON
	var changes <-chan advisory.Leader
	every := "every " + interval.String()
	if q.lock != nil {
		if ch, err := q.m.ObserveKey(ctx, q.lock.key); err == nil {
			changes, every = ch, "on change and every "+interval.String()
			<-changes // the first reading: the listing below shows it
		}
	}
	for {
		var block bytes.Buffer
		if !q.asJSON {
			fmt.Fprintf(&block, "%s %s; %s\n", display(q.title()), every,
				time.Now().Format("2006-01-02 15:04:05 MST"))
		}
		if err := q.render(ctx, &block); err != nil && ctx.Err() == nil {
			fmt.Fprintln(&block, "error: "+display(err.Error()))
		}
		if redraw {
			io.WriteString(stdout, "\x1b[H\x1b[2J")
		} else if !q.asJSON {
			block.WriteString("\n")
		}
		if ctx.Err() == nil {
			stdout.Write(block.Bytes())
		}
		select {
		case <-ctx.Done():
			sig := in.end()
			return fail(signalExitCode(sig), "status --watch: stopped by %s", signalName(sig))
		case <-time.After(interval):
		case _, ok := <-changes:
			if !ok {
				changes = nil // ended with ctx: the case above follows
			}
		}
	}
}

func (q statusQuery) title() string {
	switch {
	case q.lock != nil && q.lock.name != "":
		return fmt.Sprintf(`pgadvisory status --name "%s"`, q.lock.name)
	case q.lock != nil:
		return fmt.Sprintf("pgadvisory status --key %d", int64(q.lock.key))
	}
	return "pgadvisory status"
}
