package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory"
)

// maxDrainWait is the longest --drain-wait (advisory.WithDrainWait's limit).
const maxDrainWait = time.Hour

// drain makes sure that no server session of an earlier holder's work still runs before
// CMD starts (Lock.Drain), and says what it found. ctx ends it (a signal). On failure the
// caller releases the lock: CMD must not start while that work may still commit.
func (r *runner) drain(ctx context.Context, l *advisory.Lock) error {
	rep, err := l.Drain(ctx)
	r.reportDrain(rep)
	switch {
	case err == nil:
		return nil
	case ctx.Err() != nil:
		return err // a signal: run reports it
	case errors.Is(err, advisory.ErrLockLost), errors.Is(err, advisory.ErrNotHeld):
		return fail(exitLost, `%s was lost while draining an earlier holder's sessions: %v; `+
			"the command was not started", r.lock.label(), err)
	case permissionDenied(err): // the library's message names the lock and the remedy
		return fail(exitNoPerm, "%v; the command was not started", err)
	case errors.Is(err, advisory.ErrWorkNotDrained):
		return fail(exitNotAcquired, "%v; the command was not started", err)
	}
	return fail(exitUnavailable, `%s: cannot drain earlier holders' sessions: %v; the command was not started`,
		r.lock.label(), err)
}

// permissionDenied reports whether err is the server's refusal to terminate a session
// (SQLSTATE 42501, insufficient_privilege).
func permissionDenied(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42501"
}

// reportDrain says, one line per session, which sessions of earlier holders the drain
// found and how each ended, and which sessions that carry the lock's tag it ignored. A
// session that was terminated is always reported (run acted on someone else's work), and
// so is one ignored (someone set the tag who cannot have worked for a holder, or the
// work's role wants a --work-role); one that ended on its own is not with --quiet.
func (r *runner) reportDrain(rep advisory.DrainReport) {
	for _, s := range rep.Ignored {
		r.say(`%s: ignored a session that carries the lock's work tag: backend pid %d ("%s", role "%s"): `+
			`its role is not one run drains (run's own role "%s", one whose privileges it has, or a --work-role), `+
			"so it was neither waited for nor terminated", r.lock.label(), s.PID, s.ApplicationName, s.User, rep.Role)
	}
	for _, s := range rep.Sessions {
		if r.quiet && !s.Terminated && s.After > 0 {
			continue
		}
		r.say(`%s: an earlier holder's session was still running: backend pid %d ("%s"%s): %s`,
			r.lock.label(), s.PID, s.ApplicationName, sessionDetail(s), drainOutcome(s))
	}
}

// sessionDetail is the role and state of a drained session, where the server showed them.
func sessionDetail(s advisory.DrainedSession) string {
	var d string
	if s.User != "" {
		d += fmt.Sprintf(`, role "%s"`, s.User)
	}
	if s.State != "" {
		d += ", " + s.State
	}
	return d
}

// drainOutcome says how a drained session ended, and when.
func drainOutcome(s advisory.DrainedSession) string {
	after := s.After.Round(time.Millisecond)
	switch {
	case s.After == 0:
		return "still running"
	case s.Terminated:
		return fmt.Sprintf("terminated, gone %v after the drain began", after)
	}
	return fmt.Sprintf("ended on its own %v after the drain began", after)
}

// roleList is --work-role: the roles, besides run's own, whose tagged sessions the drain
// covers (advisory.WithWorkRoles).
type roleList []string

func (l *roleList) String() string { return strings.Join(*l, ",") }

func (l *roleList) Set(s string) error {
	if s == "" || len(s) > 63 || strings.ContainsRune(s, 0) {
		return errors.New("not a role name: want 1 to 63 bytes without NUL")
	}
	*l = append(*l, s)
	return nil
}
