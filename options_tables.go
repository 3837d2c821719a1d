package advisory

import (
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/jackc/pgx/v5"
)

// The options naming the tables of the library: fencing tokens and published leader
// values.

// DefaultFenceTable is the name of the fencing table of [Lock.Token] unless
// [WithFenceTable] sets another.
const DefaultFenceTable = "advisory_fence"

// WithFenceTable sets the table in which [Lock.Token] counts each key's fencing tokens
// and against which [Manager.CheckToken] checks them: a table name, or schema and table
// ("locks", "advisory_fence"), each used as given (quoted, never interpreted as SQL). The
// default is [DefaultFenceTable], found through the connection's search_path: give the
// schema when writers' search_path may differ, since a writer that checks another table
// is not fenced. Create the table with [Manager.CreateFenceTable].
func WithFenceTable(parts ...string) Option {
	return option(func(s *settings) error {
		table, err := tableName("fence", parts)
		if err != nil {
			return err
		}
		s.fenceTable = table
		return nil
	})
}

// DefaultLeaderTable is the table of published leader values when [WithLeaderTable] is
// given no name.
const DefaultLeaderTable = "advisory_leader"

// WithLeaderTable turns on published leader values: [Lock.Publish] stores a value there
// for its holding, and [Manager.Leader] and [Manager.Observe] read it back. parts names
// the table as [WithFenceTable] does; none: [DefaultLeaderTable]. Give the same table to
// the leader's and the followers' Managers, and create it with
// [Manager.CreateLeaderTable]. Without this option nothing is published or read: Leader
// and Observe report who leads, with an empty Value. A Lock that published a value is
// never handed to a queued Lock by [WithLocalHandoff]: its release withdraws the value.
func WithLeaderTable(parts ...string) Option {
	return option(func(s *settings) error {
		if len(parts) == 0 {
			parts = []string{DefaultLeaderTable}
		}
		table, err := tableName("leader", parts)
		if err != nil {
			return err
		}
		s.leaderTable = table
		return nil
	})
}

// tableName checks and quotes a table name given as a table or a schema and a table.
func tableName(what string, parts []string) (string, error) {
	if len(parts) < 1 || len(parts) > 2 {
		return "", fmt.Errorf("%w: %s table %q: want a table or a schema and a table", ErrInvalidOption, what, parts)
	}
	for _, p := range parts {
		if p == "" || strings.ContainsRune(p, 0) || !utf8.ValidString(p) || len(p) > 63 {
			return "", fmt.Errorf("%w: %s table name %q: want 1 to 63 bytes of valid UTF-8 without NUL",
				ErrInvalidOption, what, p)
		}
	}
	return pgx.Identifier(parts).Sanitize(), nil
}
