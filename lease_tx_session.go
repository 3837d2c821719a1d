package advisory

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// A Session held by transaction: its transaction begins with the Session (open) and ends
// with its Close (the COMMIT of txLease.unlock), which releases every lock at once.
// Each Lock call takes its keys in a savepoint of it (advisory_take), so that a call that
// fails, or whose ctx ends, rolls back to the savepoint, which releases exactly the keys
// the call may have been granted and keeps the Session's others. A lock cannot be
// released alone: Session.Unlock of a lock held once returns ErrTransactionHolding.

// takeSavepoint is the savepoint a Session's take runs in.
const takeSavepoint = "advisory_take"

// open begins the Session's transaction and records its backend.
func (txLease) open(p *pin, ctx context.Context) error {
	err := lastRow(p.pg.Exec(ctx, p.m.txBegin+"SELECT pg_catalog.pg_backend_pid()"), func(v [][]byte) error {
		if len(v) != 1 {
			return errNotOneRow
		}
		pid, err := strconv.ParseUint(string(v[0]), 10, 32)
		p.pid, p.vxid = uint32(pid), ""
		return err
	})
	if err == nil && p.pg.TxStatus() != 'T' {
		err = errors.New("the session's transaction did not begin")
	}
	return err
}

// takeKeys takes ts in a savepoint: one key with its name's comment first (see Holders),
// several in one statement, in key order.
func (txLease) takeKeys(p *pin, ctx context.Context, ts []target, try bool) (uint32, *bool, []int64, error) {
	var pid uint32
	var busy []int64
	sql := txKeysSQL(p.m, ts, try)
	if d := p.sliced(); d > 0 && !try { // a slice of the wait: see pin_slices.go
		sql = txSliceText(sql, d)
	}
	err := lastRow(p.pg.Exec(ctx, sql), func(v [][]byte) error {
		if len(v) != 2 {
			return errNotOneRow
		}
		n, err := strconv.ParseUint(string(v[0]), 10, 32)
		if err != nil {
			return fmt.Errorf("advisory: the lock statement's pid: %w", err)
		}
		pid = uint32(n)
		switch {
		case len(ts) == 1 && string(v[1]) == "f":
			busy = []int64{int64(ts[0].key)}
		case len(ts) > 1 && try:
			busy, err = parseKeyArray(string(v[1]))
		}
		return err
	})
	owned := err == nil
	return pid, &owned, busy, err
}

// txKeysSQL is the statement of a Session's take: the savepoint, then the lock function
// over the keys, returning the backend's pid and, for one key, whether it was granted;
// for a try of several, the keys found held elsewhere.
func txKeysSQL(m *Manager, ts []target, try bool) string {
	fn := "pg_catalog.pg_advisory_xact_lock"
	if try {
		fn = "pg_catalog.pg_try_advisory_xact_lock"
	}
	// Each form takes nothing on a standby and returns pid 0 there (see
	// statements_primary.go).
	sql := "SAVEPOINT " + takeSavepoint + "; " + lockRowStart
	if len(ts) == 1 {
		sql += "CASE WHEN " + onPrimary + " THEN " + fn + "(" + keyLiteral(ts[0].key) + ")"
		if name := m.activityName(ts[0].name); name != "" {
			sql = nameComment(name) + sql
		}
		if !try {
			sql += " IS NOT NULL"
		}
		return sql + " END"
	}
	keys := make([]string, len(ts))
	for i, t := range ts {
		keys[i] = strconv.FormatInt(int64(t.key), 10)
	}
	from := " FROM pg_catalog.unnest('{" + strings.Join(keys, ",") + "}'::bigint[]) AS t(k) WHERE " + onPrimary
	if !try {
		return sql + "pg_catalog.count(" + fn + "(k))" + from
	}
	return sql + "coalesce(pg_catalog.array_agg(k) FILTER (WHERE NOT got), '{}') FROM (SELECT k, " + fn +
		"(k) AS got" + from + ") x"
}

// parseKeyArray reads a bigint[] in PostgreSQL's text form ("{1,-2}").
func parseKeyArray(s string) ([]int64, error) {
	inner, ok := strings.CutPrefix(s, "{")
	if inner, ok = strings.CutSuffix(inner, "}"); !ok {
		return nil, fmt.Errorf("advisory: unexpected key array %q", s)
	}
	if inner == "" {
		return nil, nil
	}
	var out []int64
	for _, f := range strings.Split(inner, ",") {
		k, err := strconv.ParseInt(f, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("advisory: unexpected key array %q: %w", s, err)
		}
		out = append(out, k)
	}
	return out, nil
}

// keepKeys releases the take's savepoint: its keys join the Session's transaction. A
// failure (a late cancel striking it, say) leaves them unknown: the caller ends the
// Session, whose connection's close frees them all.
func (txLease) keepKeys(p *pin, _ bool) error {
	return p.afterCancelExec(false, "RELEASE SAVEPOINT "+takeSavepoint)
}

// clearKeys rolls back to the take's savepoint, which releases whatever keys the take
// was granted, and keeps the Session's others.
func (txLease) clearKeys(p *pin, _ []int64, cancelSent bool) error {
	return p.afterCancelExec(cancelSent, "ROLLBACK TO SAVEPOINT "+takeSavepoint+"; RELEASE SAVEPOINT "+takeSavepoint)
}

// unlocksOne: transaction-level locks end only with their transaction.
func (txLease) unlocksOne() bool { return false }

// afterCancelExec runs sql, bounded by cleanupTimeout, on a connection whose lock
// statement may have been sent a CancelRequest (cancelSent): that cancel may strike it
// instead (57014), and then it runs again; the cancel cannot strike twice. sql must be
// safe to run again after a failure (a rollback to a savepoint is).
func (p *pin) afterCancelExec(cancelSent bool, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	for attempt := 0; ; attempt++ {
		_, err := p.pg.Exec(ctx, sql).ReadAll()
		if err == nil || !cancelSent || attempt == 2 || !isQueryCanceled(err) {
			return err
		}
	}
}
