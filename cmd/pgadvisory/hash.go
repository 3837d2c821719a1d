package main

import (
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/pgadvisory/advisory"
)

// hashCommand prints the key of a lock name and the psql statements for the same lock.
func hashCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pgadvisory hash", flag.ContinueOnError)
	slots := fs.Int("slots", 0, "also print the slot and turnstile keys of a semaphore with this limit")
	ns := fs.String("namespace", "", "the namespace of NAME, as the library's WithNamespace")
	if err := parseFlags(fs, args, hashHelp, stdout); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError(fs.Name(), "takes exactly one NAME, got %d arguments "+
			"(quote a name that contains spaces: pgadvisory hash 'my lock')", fs.NArg())
	}
	name := fs.Arg(0)
	if err := advisory.ValidateName(name); err != nil {
		return usageError(fs.Name(), "%v", err)
	}
	nsGiven := false
	fs.Visit(func(f *flag.Flag) { nsGiven = nsGiven || f.Name == "namespace" })
	if nsGiven && *ns == "" {
		return usageError(fs.Name(), "--namespace is empty (an unset shell variable?)")
	}
	name, err := namespaced(*ns, name)
	if err != nil {
		return usageError(fs.Name(), "%v", err)
	}
	if *slots != 0 && (*slots < 1 || *slots > advisory.MaxSemaphoreLimit) {
		return usageError(fs.Name(), "--slots %d: a semaphore's limit is between 1 and %d", *slots, advisory.MaxSemaphoreLimit)
	}
	key := advisory.KeyOf(name)
	fmt.Fprintf(stdout, "%d\n\n", key)
	fmt.Fprintf(stdout, "-- the lock pgadvisory and advisory.Lock take for the name \"%s\":\n", escape(name))
	fmt.Fprintf(stdout, "SELECT pg_advisory_lock(%d);\n", key)
	fmt.Fprintf(stdout, "SELECT pg_advisory_lock(hashtextextended(%s, 0));  -- the same key\n", sqlLiteral(name))
	fmt.Fprintf(stdout, "SELECT pg_try_advisory_lock(%d);\n", key)
	fmt.Fprintf(stdout, "SELECT pg_advisory_unlock(%d);\n", key)
	printPooled(stdout, key)
	if *slots > 0 {
		printSemaphore(stdout, name, *slots)
	}
	return nil
}

// printPooled prints the same lock in the form that holds through a transaction pooler:
// a session lock taken there stays on whichever pooled server connection ran it (and the
// unlock may run on another), while a transaction-level lock lives exactly as long as
// the transaction, which the pooler keeps on one server connection. Each statement is a
// line of its own (one message each in psql), because a one-message "BEGIN; ..." is
// answered by some poolers (PgDog's query parser) with a BEGIN of their own.
func printPooled(stdout io.Writer, key advisory.Key) {
	fmt.Fprintf(stdout, "\n-- through a transaction pooler (PgBouncer pool_mode=transaction, Supabase's port 6543,\n"+
		"-- Neon's -pooler endpoints, RDS Proxy), where the session lines above strand the lock\n"+
		"-- on a pooled server connection, hold it for one transaction (COMMIT or ROLLBACK releases it):\n")
	fmt.Fprintf(stdout, "BEGIN;\n")
	fmt.Fprintf(stdout, "SELECT pg_advisory_xact_lock(%d);\n", key)
	fmt.Fprintf(stdout, "-- ... the statements the lock protects ...\n")
	fmt.Fprintf(stdout, "COMMIT;\n")
	fmt.Fprintf(stdout, "SELECT pg_try_advisory_xact_lock(%d);  -- after BEGIN, instead of waiting\n", key)
}

// printSemaphore prints the keys of the semaphore NAME with limit slots, as
// advisory.Manager.Semaphore names them (docs/keys.md): slot i is the lock "NAME#slot/i",
// the turnstile "NAME#turnstile".
func printSemaphore(stdout io.Writer, name string, slots int) {
	fmt.Fprintf(stdout, "\n-- the %d slots of the semaphore \"%s\" (advisory.Manager.Semaphore): "+
		"holding any one of them takes a slot\n", slots, escape(name))
	for i := range slots {
		slot := name + "#slot/" + strconv.Itoa(i)
		fmt.Fprintf(stdout, "SELECT pg_try_advisory_lock(%d);  -- %s\n", advisory.KeyOf(slot), escape(slot))
	}
	fmt.Fprintf(stdout, "-- its turnstile, the lock waiting Acquire calls queue on:\n")
	fmt.Fprintf(stdout, "SELECT pg_advisory_lock(%d);  -- %s\n", advisory.KeyOf(name+"#turnstile"), escape(name+"#turnstile"))
}

// sqlLiteral quotes s as a SQL string literal that means s whatever
// standard_conforming_strings says, and that prints safely on one line. A string of
// printable characters without a backslash is written 'like this' (quotes doubled); any
// other in the escape string form E'like\x1bthis', where a backslash is always an escape.
// s must be valid UTF-8 (the \u escapes need a UTF8 database, as hashing the name as
// KeyOf does).
func sqlLiteral(s string) string {
	plain := utf8.ValidString(s)
	for _, r := range s {
		plain = plain && r != '\\' && printable(r)
	}
	if plain {
		return "'" + strings.ReplaceAll(s, "'", "''") + "'"
	}
	var b strings.Builder
	b.WriteString("E'")
	for _, r := range s {
		switch {
		case r == '\'':
			b.WriteString("''")
		case r == '\\':
			b.WriteString(`\\`)
		case printable(r):
			b.WriteRune(r)
		default:
			b.WriteString(sqlEscape(r))
		}
	}
	b.WriteString("'")
	return b.String()
}

// sqlEscape writes a non-printable rune as an escape of PostgreSQL's E'...' strings: \xHH
// (at most two hex digits, so a digit after it is not taken in), \uXXXX or \UXXXXXXXX.
func sqlEscape(r rune) string {
	switch {
	case r < 0x80:
		return fmt.Sprintf(`\x%02x`, r)
	case r <= 0xffff:
		return fmt.Sprintf(`\u%04x`, r)
	}
	return fmt.Sprintf(`\U%08x`, r)
}
