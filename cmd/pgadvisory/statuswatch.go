package main

import (
	"bytes"
	"context"
	"encoding/json"
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
	rows, err := q.rows(ctx)
	if err != nil {
		return err
	}
	return q.print(w, rows)
}

// rows queries the server for the listing.
func (q statusQuery) rows(ctx context.Context) ([]statusRow, error) {
	var hs []advisory.Holder
	var err error
	if q.lock != nil {
		hs, err = q.m.HoldersKey(ctx, q.lock.key)
	} else {
		hs, err = q.m.AllHolders(ctx)
	}
	switch {
	case errors.Is(err, advisory.ErrPooler):
		return nil, poolerError("status", "the address pgadvisory connected to", err)
	case err != nil:
		return nil, fail(exitUnavailable, "status: %v", err)
	}
	rows := make([]statusRow, len(hs))
	for i, h := range hs {
		rows[i] = toRow(h)
	}
	return rows, nil
}

// print prints the listing on w, as a table or as JSON.
func (q statusQuery) print(w io.Writer, rows []statusRow) error {
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

// watch prints the listing until a signal. On a terminal it redraws it in place (cursor
// home, clear screen) every interval. Otherwise (a log, a pipe) it prints a plain block
// after the last one only when the listing changed (who holds or waits, since when; a
// failed query's error), looking every interval, so the log reads as a history of
// changes. Watching one lock, it also looks as soon as its holder changes, as
// Manager.Observe reports it (a holder that announces itself, as run does, at once;
// another at the observer's re-check, every interval). A failed query is shown and tried
// again at the next look. It ends with 128+N for signal N.
func (q statusQuery) watch(ctx context.Context, in *interrupter, interval time.Duration, stdout io.Writer) error {
	f, ok := stdout.(*os.File)
	redraw := ok && isTerminal(f) && !q.asJSON
	var changes <-chan advisory.Leader
	if q.lock != nil {
		if ch, err := q.m.ObserveKey(ctx, q.lock.key); err == nil {
			changes = ch
			<-changes // the first reading: the listing below shows it
		}
	}
	header := display(q.title()) + " " + watchWhen(interval, changes != nil, redraw)
	last := "" // what the last block showed, when only changes are printed
	for {
		block, shown := q.block(ctx, header, !redraw)
		if ctx.Err() == nil && (redraw || shown != last) {
			if redraw {
				io.WriteString(stdout, "\x1b[H\x1b[2J")
			}
			stdout.Write(block)
			last = shown
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

// watchWhen says in the header when a block is printed.
func watchWhen(interval time.Duration, observed, redraw bool) string {
	switch {
	case redraw && observed:
		return "on change and every " + interval.String()
	case redraw:
		return "every " + interval.String()
	}
	return "on change (checked every " + interval.String() + ")"
}

// block queries and returns one block to print (the header and the time, unless --json;
// the listing or the query's error; a blank line after a table if apart), and what it
// shows: the rows or the error, without the time and the ages that change at every look.
func (q statusQuery) block(ctx context.Context, header string, apart bool) (block []byte, shown string) {
	var b bytes.Buffer
	if !q.asJSON {
		fmt.Fprintf(&b, "%s; %s\n", header, time.Now().Format("2006-01-02 15:04:05 MST"))
	}
	rows, err := q.rows(ctx)
	if err == nil {
		err = q.print(&b, rows)
	}
	if err != nil {
		shown = "error: " + display(err.Error())
		fmt.Fprintln(&b, shown)
	} else {
		j, _ := json.Marshal(rows)
		shown = string(j)
	}
	if apart && !q.asJSON {
		b.WriteString("\n")
	}
	return b.Bytes(), shown
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
