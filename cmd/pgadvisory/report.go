package main

import (
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/pgadvisory/advisory"
)

// describeHolders says in one line who holds a lock and how many wait, for the messages
// of run ("held by backend pid 4242 (pgadvisory pod-a/17, 10.0.0.5:5432) for 12s; 2
// waiting"). The pid is the server's backend process id, the one pg_terminate_backend takes.
func describeHolders(hs []advisory.Holder, now time.Time) string {
	var held []string
	waiting := 0
	for _, h := range hs {
		if !h.Granted {
			waiting++
			continue
		}
		held = append(held, describeHolder(h, now))
	}
	var b strings.Builder
	switch len(held) {
	case 0:
		b.WriteString("not held right now")
	default:
		b.WriteString("held by " + strings.Join(held, " and "))
	}
	if waiting > 0 {
		fmt.Fprintf(&b, "; %d waiting", waiting)
	}
	return b.String()
}

func describeHolder(h advisory.Holder, now time.Time) string {
	var who []string
	if h.ApplicationName != "" {
		who = append(who, `"`+h.ApplicationName+`"`) // escaped with the whole message
	}
	switch {
	case h.ClientAddr != "":
		who = append(who, h.ClientAddr)
	case clientHidden(h):
		who = append(who, "client not visible to this role")
	default:
		who = append(who, "local socket")
	}
	s := fmt.Sprintf("backend pid %d", h.PID)
	if len(who) > 0 {
		s += " (" + strings.Join(who, ", ") + ")"
	}
	if !h.Since.IsZero() {
		s += " for " + age(now.Sub(h.Since))
	}
	return s
}

// holderIdentity identifies the sessions that hold a lock by pid, application_name and
// client, and not by how long they have held it: run reports again when it changes.
func holderIdentity(hs []advisory.Holder) string {
	var ids []string
	for _, h := range hs {
		if h.Granted {
			ids = append(ids, fmt.Sprintf("%d\x00%s\x00%s", h.PID, h.ApplicationName, h.ClientAddr))
		}
	}
	sort.Strings(ids)
	return strings.Join(ids, "\x00\x00")
}

// age rounds a duration for people: 850ms, 12s, 3m05s, 2h10m.
func age(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return d.Round(time.Millisecond).String()
	case d < time.Minute:
		return d.Round(time.Second).String()
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	}
	return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
}
