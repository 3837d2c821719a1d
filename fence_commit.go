package advisory

import (
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
)

// Confirmed commits. With synchronous replication a COMMIT waits until the standby has
// the transaction; if that wait is cancelled (a CancelRequest sent for the caller's ctx,
// pg_cancel_backend, a timeout of the library's own), PostgreSQL reports the COMMIT as a
// success with only a WARNING ("canceling wait for synchronous replication ... committed
// locally, but might not have been replicated"). After a failover to that standby the
// commit is gone: a fencing token reported taken would be handed out again. So every
// commit the library makes for the caller (Lock.Token, BeginFunc, DoTx, CreateFenceTable)
// is confirmed only if the server sent no WARNING while it ran; a commit with one is
// reported as unconfirmed (ErrCommitUnconfirmed), never as done. Notices are matched by
// severity, not by their text, which the server translates.

// warnKey is where a connection's last WARNING is kept in PgConn.CustomData, from
// OnNotice.
const warnKey = "advisory.warning"

// noticeRecorder returns an OnNotice handler that keeps the last WARNING of each
// connection (see takeWarning), then calls next, the caller's own handler, if any.
func noticeRecorder(next pgconn.NoticeHandler) pgconn.NoticeHandler {
	return func(pg *pgconn.PgConn, n *pgconn.Notice) {
		sev := n.SeverityUnlocalized
		if sev == "" {
			sev = n.Severity
		}
		if sev == "WARNING" {
			pg.CustomData()[warnKey] = n
		}
		if next != nil {
			next(pg, n)
		}
	}
}

// clearWarning forgets the connection's last WARNING, before a commit.
func clearWarning(pg *pgconn.PgConn) { delete(pg.CustomData(), warnKey) }

// takeWarning returns the WARNING the connection received since clearWarning, if any,
// and forgets it.
func takeWarning(pg *pgconn.PgConn) *pgconn.Notice {
	n, _ := pg.CustomData()[warnKey].(*pgconn.Notice)
	clearWarning(pg)
	return n
}

// unconfirmed is the error of a commit the server reported with a WARNING.
func unconfirmed(what string, n *pgconn.Notice) error {
	text := n.Message
	if n.Detail != "" {
		text += " (" + strings.TrimSuffix(n.Detail, ".") + ")"
	}
	return fmt.Errorf("%w: %s: the server warned: %s", ErrCommitUnconfirmed, what, text)
}
