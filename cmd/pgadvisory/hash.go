package main

import (
	"flag"
	"fmt"
	"io"

	"github.com/pgadvisory/advisory"
)

// hashCommand prints the key of a lock name and the psql statements for the same lock.
func hashCommand(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("pgadvisory hash", flag.ContinueOnError)
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
	key := advisory.KeyOf(name)
	fmt.Fprintf(stdout, "%d\n\n", key)
	lit := sqlLiteral(name)
	fmt.Fprintf(stdout, "-- the lock pgadvisory and advisory.Lock take for %s:\n", lit)
	fmt.Fprintf(stdout, "SELECT pg_advisory_lock(%d);\n", key)
	fmt.Fprintf(stdout, "SELECT pg_advisory_lock(hashtextextended(%s, 0));  -- the same key\n", lit)
	fmt.Fprintf(stdout, "SELECT pg_try_advisory_lock(%d);\n", key)
	fmt.Fprintf(stdout, "SELECT pg_advisory_unlock(%d);\n", key)
	return nil
}

// sqlLiteral quotes s as a standard SQL string literal.
func sqlLiteral(s string) string {
	out := []byte{'\''}
	for i := 0; i < len(s); i++ {
		if s[i] == '\'' {
			out = append(out, '\'')
		}
		out = append(out, s[i])
	}
	return string(append(out, '\''))
}
