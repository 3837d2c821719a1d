package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"
	"unicode/utf16"

	"github.com/pgadvisory/advisory"
)

// statusRow is one line of `status --json`. The field names are stable: scripts may rely
// on them. key is a string because JSON numbers lose int64 precision in most parsers.
type statusRow struct {
	Key             string `json:"key"`
	Pair            bool   `json:"pair"`           // taken as pg_advisory_lock(int4, int4): key is hi<<32|lo
	Name            string `json:"name,omitempty"` // when taken through this library
	Mode            string `json:"mode"`           // "exclusive" or "shared"
	State           string `json:"state"`          // "holding" or "waiting"
	PID             uint32 `json:"pid"`
	ApplicationName string `json:"application_name"`
	Client          string `json:"client"` // host:port; "" over a Unix socket, or when hidden
	// ClientHidden: the role may not see the session's details (another role's, without
	// pg_read_all_stats), so an empty Client says nothing about how it connected.
	ClientHidden bool      `json:"client_hidden,omitempty"`
	BackendStart time.Time `json:"backend_start"`
	Since        time.Time `json:"since"` // holding: when granted (approx.); waiting: when the wait began
}

func statusCommand(args []string, global connFlags, stdout io.Writer) error {
	fs := flag.NewFlagSet("pgadvisory status", flag.ContinueOnError)
	conn := global
	var lock lockFlags
	lock.register(fs)
	asJSON := fs.Bool("json", false, "print a JSON array (stable field names) instead of a table")
	var interval time.Duration
	fs.Var(watchValue{&interval}, "watch", "refresh every INTERVAL (default 2s) until interrupted")
	conn.register(fs, 0)
	if err := parseFlags(fs, args, statusHelp, stdout); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError(fs.Name(), `unexpected argument "%s" (the connection string goes in --dsn; `+
			`an interval goes in --watch=INTERVAL)`, fs.Arg(0))
	}
	target, filtered, err := lock.target(fs, false)
	if err != nil {
		return err
	}
	if err := conn.check(fs.Name()); err != nil {
		return err
	}
	q := statusQuery{asJSON: *asJSON}
	if filtered {
		q.lock = &target
	}
	if interval > 0 {
		return watchStatus(conn, q, interval, stdout)
	}
	m, err := conn.connect(context.Background(), "status", "pgadvisory status")
	if err != nil {
		return err
	}
	defer m.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	q.m = m
	return q.render(ctx, stdout)
}

// watchStatus connects and runs q.watch until a signal ends it; a signal also ends the
// connect at once.
func watchStatus(conn connFlags, q statusQuery, interval time.Duration, stdout io.Writer) error {
	sigs, stop := notifySignals()
	defer stop()
	ctx, in := watchInterrupts(sigs)
	defer in.end()
	m, err := conn.connect(ctx, "status", "pgadvisory status", advisory.WithLeaderRecheck(interval))
	if err != nil {
		return interrupted(in, "status", err)
	}
	defer m.Close()
	q.m = m
	return q.watch(ctx, in, interval, stdout)
}

// printJSON writes rows as indented JSON. The values are exact (they decode to what the
// server said), and the text is still safe on a terminal: characters that escape would
// escape are written as \u escapes, which JSON decoders read back as the same characters.
func printJSON(w io.Writer, rows []statusRow) error {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rows); err != nil {
		return fail(exitSoftware, "status: %v", err)
	}
	_, err := w.Write(terminalSafeJSON(buf.Bytes()))
	return err
}

// terminalSafeJSON rewrites the non-printable characters of encoding/json's output (which
// can only occur inside strings: JSON's own syntax is printable ASCII plus the newlines of
// indentation) as \u escapes: DEL, C1 controls, bidi overrides, and so on.
func terminalSafeJSON(b []byte) []byte {
	var out bytes.Buffer
	for _, r := range string(b) {
		switch {
		case r == '\n' || printable(r):
			out.WriteRune(r)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			fmt.Fprintf(&out, `\u%04x\u%04x`, r1, r2)
		default:
			fmt.Fprintf(&out, `\u%04x`, r)
		}
	}
	return out.Bytes()
}

func toRow(h advisory.Holder) statusRow {
	r := statusRow{Key: strconv.FormatInt(int64(h.Key), 10), Pair: h.Pair, Name: h.Name, Mode: "exclusive",
		State: "holding", PID: h.PID, ApplicationName: h.ApplicationName, Client: h.ClientAddr,
		BackendStart: h.BackendStart, Since: h.Since, ClientHidden: clientHidden(h)}
	if h.Shared {
		r.Mode = "shared"
	}
	if !h.Granted {
		r.State = "waiting"
	}
	return r
}

// noLocks is what printTable says when the listing of every lock is empty.
const noLocks = "no advisory locks held or awaited in this database"

// printTable prints rows as a table, or the line none when there are none.
func printTable(w io.Writer, rows []statusRow, now time.Time, none string) {
	if len(rows) == 0 {
		fmt.Fprintln(w, display(none))
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tNAME\tMODE\tSTATE\tPID\tAPPLICATION\tCLIENT\tFOR")
	for _, r := range rows {
		name, client, key := r.Name, r.Client, r.Key
		if name == "" {
			name = "-"
		}
		switch {
		case r.ClientHidden:
			client = "(hidden)"
		case client == "":
			client = "local"
		}
		if r.Pair {
			key = fmt.Sprintf("(%d,%d)", mustInt(r.Key)>>32, int32(mustInt(r.Key)))
		}
		since := "-"
		if !r.Since.IsZero() {
			since = age(now.Sub(r.Since))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", key, display(name), r.Mode, r.State, r.PID,
			display(r.ApplicationName), display(client), since)
	}
	tw.Flush()
}

// clientHidden reports that pg_stat_activity hid the session's details from this role: a
// session it may see always has a backend_start, over TCP and Unix sockets alike.
func clientHidden(h advisory.Holder) bool { return h.ClientAddr == "" && h.BackendStart.IsZero() }

func mustInt(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
