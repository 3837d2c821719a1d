package advisory

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// fixedText is what a parse error says besides the connection string: a password that is
// a piece of it cannot be told from it.
const fixedText = "advisory: invalid option: connection string `xxxxx`: cannot parse failed to parse as " +
	"keyword/value (invalid keyword/value) invalid port URL"

// FuzzParseErrorHidesPasswords: for any keyword/value string whose password pgx extracts,
// the same string made unparsable (an invalid port) fails New with an error that does not
// contain that password. pgx's own masking is by pattern, and used to leave most of a
// quoted password with an escaped quote in it on show.
func FuzzParseErrorHidesPasswords(f *testing.F) {
	for _, s := range []string{
		`host=127.0.0.1 password='it\'s S3cr3tPW'`,
		`host=h password=it\'s\ S3cr3tPW user=u`,
		`password = 'a b c d' host=h`,
		`host=h password='x\\' y=z'`,
		`PASSWORD=abcdefg host=h`,
		`host=h password='quoted ''twice'''`,
		`host=h sslpassword='s3cr3t key' password='pw pw pw'`,
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if strings.HasPrefix(s, "postgres") {
			return // URLs: see connstr's own tests
		}
		cfg, err := pgconn.ParseConfig(s)
		if err != nil || len(cfg.Password) < 4 || strings.Contains(fixedText, cfg.Password) {
			return
		}
		broken := s + " port=abc"
		if strings.Count(broken, cfg.Password) > 1 {
			return // also elsewhere in the string: not only a password
		}
		_, err = New(context.Background(), broken)
		if err == nil {
			t.Fatalf("New(%q) parsed", broken)
		}
		// The password, and every word of it long enough to tell (a part shown is a part
		// given away), must be absent.
		for _, part := range append(strings.Fields(cfg.Password), cfg.Password) {
			if len(part) >= 5 && !strings.Contains(fixedText, part) && strings.Count(broken, part) == 1 &&
				strings.Contains(err.Error(), part) {
				t.Fatalf("%q of password %q in the error of New(%q): %v", part, cfg.Password, broken, err)
			}
		}
	})
}
