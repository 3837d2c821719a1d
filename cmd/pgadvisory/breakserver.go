package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/pgadvisory/advisory"
)

// The statements break sends itself name every function, relation, cast and operator
// with its schema, pg_catalog: a role whose search_path puts another schema ahead of
// pg_catalog (ALTER ROLE ... SET search_path = evil, pg_catalog) would otherwise run that
// schema's pg_terminate_backend or "=" (the CVE-2018-1058 pattern), and break would
// report a termination that never happened.

// privilegeSQL tells, for each pid, its role, whether that role is a superuser, who we
// are, and whether we may terminate it: the rule of PostgreSQL's pg_terminate_backend
// (only a superuser may terminate a superuser's backend; otherwise the privileges of its
// role or of pg_signal_backend are needed).
const privilegeSQL = `
SELECT a.pid, coalesce(a.usename::pg_catalog.text, ''), coalesce(r.rolsuper, false), current_user::pg_catalog.text,
       CASE WHEN coalesce(r.rolsuper, false) THEN me.rolsuper
            ELSE me.rolsuper OR pg_catalog.pg_has_role(current_user, 'pg_signal_backend', 'USAGE')
                 OR coalesce(pg_catalog.pg_has_role(current_user, r.oid, 'USAGE'), false) END
FROM pg_catalog.pg_stat_activity a LEFT JOIN pg_catalog.pg_roles r ON r.oid OPERATOR(pg_catalog.=) a.usesysid,
     (SELECT rolsuper FROM pg_catalog.pg_roles WHERE rolname OPERATOR(pg_catalog.=) current_user) me
WHERE a.pid OPERATOR(pg_catalog.=) ANY($1)`

// checkPrivilege refuses (exit 77) before asking anything when we may not terminate one
// of pids, and says which role it takes.
func (b *breaker) checkPrivilege(ctx context.Context, pids []uint32) error {
	rows, err := b.conn.Query(ctx, privilegeSQL, pids)
	if err != nil {
		return fail(exitUnavailable, "break: check privileges: %v", err)
	}
	defer rows.Close()
	var problems []string
	for rows.Next() {
		var pid uint32
		var role, me string
		var super, allowed bool
		if err := rows.Scan(&pid, &role, &super, &me, &allowed); err != nil {
			return fail(exitUnavailable, "break: check privileges: %v", err)
		}
		if !allowed {
			problems = append(problems, privilegeProblem(pid, role, me, super))
		}
	}
	if err := rows.Err(); err != nil {
		return fail(exitUnavailable, "break: check privileges: %v", err)
	}
	if len(problems) > 0 {
		return fail(exitNoPerm, "break: permission denied: %s; nothing was terminated", strings.Join(problems, "; "))
	}
	return nil
}

func privilegeProblem(pid uint32, role, me string, super bool) string {
	if super {
		return fmt.Sprintf("backend pid %d belongs to superuser role %q, and only a superuser may terminate it "+
			"(you are %q)", pid, role, me)
	}
	return fmt.Sprintf("terminating backend pid %d (role %q) takes superuser, membership in pg_signal_backend "+
		"(GRANT pg_signal_backend TO %q), or membership in role %q; %q has none of these", pid, role, me, role, me)
}

// terminateSQL terminates pid only if it still holds the key: a session that let go of
// the lock since it was shown is left alone.
const terminateSQL = `
SELECT pg_catalog.pg_terminate_backend(l.pid) FROM pg_catalog.pg_locks l
WHERE l.locktype OPERATOR(pg_catalog.=) 'advisory' AND l.granted AND l.objsubid OPERATOR(pg_catalog.=) 1
  AND l.classid OPERATOR(pg_catalog.=) $1 AND l.objid OPERATOR(pg_catalog.=) $2
  AND l.database OPERATOR(pg_catalog.=) (SELECT oid FROM pg_catalog.pg_database
                                         WHERE datname OPERATOR(pg_catalog.=) pg_catalog.current_database())
  AND l.pid OPERATOR(pg_catalog.=) $3`

// terminate terminates each holder that still holds the lock and returns those it
// terminated.
func (b *breaker) terminate(ctx context.Context, pids []uint32, hs []advisory.Holder) ([]uint32, error) {
	hi, lo := uint32(uint64(b.target.key)>>32), uint32(b.target.key)
	var done []uint32
	for _, pid := range pids {
		var ok bool
		err := b.conn.QueryRow(ctx, terminateSQL, hi, lo, pid).Scan(&ok)
		var pe *pgconn.PgError
		switch {
		case errors.Is(err, pgx.ErrNoRows):
			fmt.Fprintf(b.stdout, "backend pid %d no longer holds the lock; left alone\n", pid)
			continue
		case errors.As(err, &pe) && pe.Code == "42501":
			return done, fail(exitNoPerm, "break: permission denied terminating backend pid %d: %s (%s)",
				pid, pe.Message, pe.Detail)
		case err != nil:
			return done, fail(exitUnavailable, "break: terminate backend pid %d: %v", pid, err)
		case !ok:
			fmt.Fprintf(b.stdout, "backend pid %d was gone already\n", pid)
			continue
		}
		done = append(done, pid)
		fmt.Fprintln(b.stdout, "terminated "+display(describeHolder(holderOf(hs, pid), time.Now())))
	}
	return done, nil
}

func holderOf(hs []advisory.Holder, pid uint32) advisory.Holder {
	for _, h := range hs {
		if h.PID == pid && h.Granted {
			return h
		}
	}
	return advisory.Holder{PID: pid}
}

// waitReleased polls until none of pids holds the lock, then says whether it is free or
// whom it went to. After b.wait it gives up: exit 75 if the lock was still held, 69 if
// the server did not answer.
func (b *breaker) waitReleased(ctx context.Context, pids []uint32) error {
	started := time.Now()
	deadline := started.Add(b.wait)
	for {
		qctx, cancel := context.WithDeadline(ctx, deadline.Add(time.Second))
		hs, err := b.m.HoldersKey(qctx, b.target.key)
		cancel()
		switch {
		case ctx.Err() != nil:
			return ctx.Err() // a signal
		case err == nil && !holdsAny(hs, pids):
			b.reportReleased(hs, time.Since(started))
			return nil
		case time.Now().After(deadline) && err != nil:
			return fail(exitUnavailable, "break: waiting for the lock to be released: %v", err)
		case time.Now().After(deadline):
			return fail(exitStillHeld, "break: %s still held by a terminated backend after %s", b.target, b.wait)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (b *breaker) reportReleased(hs []advisory.Holder, took time.Duration) {
	now := time.Now()
	if len(grantedPIDs(hs)) == 0 {
		fmt.Fprintln(b.stdout, display(fmt.Sprintf("%s is free now (released %s after the termination)",
			b.target, age(took))))
		return
	}
	fmt.Fprintln(b.stdout, display(fmt.Sprintf("%s was released %s after the termination and is now %s "+
		"(a new holder)", b.target, age(took), describeHolders(hs, now))))
}

func holdsAny(hs []advisory.Holder, pids []uint32) bool {
	for _, h := range hs {
		for _, p := range pids {
			if h.Granted && h.PID == p {
				return true
			}
		}
	}
	return false
}
