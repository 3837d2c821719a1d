package advisory

import (
	"fmt"
	"strings"

	"github.com/pgadvisory/advisory/internal/sqlscan"
)

// The statements fenced work may not send (ErrFencedStatement). A fenced transaction is
// the lock's: on a session holding its commit is checked against the lock's session, on
// a transaction holding it is the lock itself, whose COMMIT or ROLLBACK frees the lock at
// once while the holder believes it holds it. Session settings changed in it outlive fn
// on the lock's connection (the next holding's waits would meet fn's lock_timeout or
// statement_timeout, its keepalives would move below the bound the client was told) and,
// behind a transaction pooler, reach other clients of the server connection. So each
// statement sent through fn's tx is read (internal/sqlscan) and refused before it is sent
// if it is one of these. Statements run inside functions, procedures or DO blocks are not
// read: the server refuses transaction control there inside a transaction block, and
// set_config or pg_advisory_unlock inside a function is the caller's to avoid.

// fencedRefusal returns an error wrapping ErrFencedStatement if sql has a statement that
// fenced work may not send, else nil.
func fencedRefusal(sql string) error {
	for _, st := range sqlscan.Split(sql) {
		if why := refusedStatement(st); why != "" {
			return fmt.Errorf("%w: %s", ErrFencedStatement, why)
		}
	}
	return nil
}

// refusedStatement says why fenced work may not send st, or "" if it may.
func refusedStatement(st sqlscan.Statement) string {
	w := append(st.Words(4), "", "", "", "")
	switch w[0] {
	case "begin", "start", "commit", "end", "abort":
		return txControl(w[0])
	case "rollback":
		if w[1] != "to" {
			return txControl(w[0])
		}
		return librarySavepoint(st, "ROLLBACK TO")
	case "release", "savepoint":
		return librarySavepoint(st, strings.ToUpper(w[0]))
	case "prepare":
		if w[1] == "transaction" {
			return txControl("prepare transaction")
		}
	case "set":
		return sessionSet(w)
	case "reset", "discard":
		return fmt.Sprintf("%s changes the lock connection's session, which outlives fn "+
			"(behind a transaction pooler, other clients' too): use SET LOCAL, which ends with the transaction",
			strings.ToUpper(w[0]))
	}
	return refusedCall(st)
}

func txControl(word string) string {
	return strings.ToUpper(word) + " would end the fenced transaction, which belongs to the lock (on a transaction " +
		"holding it is the lock, and its end frees the lock at once): return nil from fn to commit, an error to roll " +
		"back; use tx.Begin for a savepoint"
}

// librarySavepoint refuses a savepoint statement naming one of the library's savepoints
// (advisory_...), which hold fn's work and the holding's takes apart.
func librarySavepoint(st sqlscan.Statement, what string) string {
	for _, t := range st[1:] {
		if (t.Kind == sqlscan.Word || t.Kind == sqlscan.Ident) && strings.HasPrefix(strings.ToLower(t.Text), "advisory_") {
			return fmt.Sprintf("%s %q names the library's savepoint: use savepoints of your own (tx.Begin)", what, t.Text)
		}
	}
	return ""
}

// sessionSet refuses a SET that outlives the transaction: all but SET LOCAL, SET
// TRANSACTION and SET CONSTRAINTS.
func sessionSet(w []string) string {
	switch {
	case w[1] == "local" || w[1] == "transaction" || w[1] == "constraints":
		return ""
	case w[1] == "session" && w[2] == "characteristics":
		return "SET SESSION CHARACTERISTICS changes the lock connection's session, which outlives fn: " +
			"use SET TRANSACTION"
	}
	name := w[1]
	if name == "session" {
		name = w[2]
	}
	return fmt.Sprintf("SET %q without LOCAL changes the lock connection's session, which outlives fn "+
		"(the lock's later waits and keepalives, and behind a transaction pooler other clients): use SET LOCAL", name)
}

// refusedCall refuses calls that release advisory locks, or change a setting for the
// session (set_config whose third argument is not the literal true).
func refusedCall(st sqlscan.Statement) string {
	for _, c := range st.Calls() {
		name := strings.ToLower(c.Name)
		switch {
		case strings.HasPrefix(name, "pg_advisory_unlock"):
			return name + " would release advisory locks of the lock's connection, the fencing lock's included"
		case name == "set_config" && !isLocal(c.Args):
			return "set_config with a third argument other than true changes the lock connection's session, " +
				"which outlives fn: pass true (local to the transaction)"
		}
	}
	return ""
}

func isLocal(args []sqlscan.Statement) bool {
	return len(args) == 3 && len(args[2]) == 1 && args[2][0].Kind == sqlscan.Word && args[2][0].Text == "true"
}
