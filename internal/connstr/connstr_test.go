package connstr

import (
	"strings"
	"testing"
)

func TestRedact(t *testing.T) {
	for _, tc := range []struct{ in, secret string }{
		{"postgres://u:S3cr3tPW@h:5432/db", "S3cr3tPW"},
		{"postgresql://u:S3cr%2FetPW@h1,h2/db?sslmode=disable", "S3cr/etPW"},
		{"postgres://u:S3cr@t/PW@h/db", "S3cr@t/PW"}, // unescaped: malformed, still found
		{"postgres://h/db?sslmode=disable&password=S3cr3tPW", "S3cr3tPW"},
		{"host=h password=S3cr3tPW port=abc", "S3cr3tPW"},
		{"host=h password = S3cr3tPW port=abc", "S3cr3tPW"},
		{"host=h password= 'S3cr3t PW' port=abc", "S3cr3t PW"},
		{`host=h password='S3cr\'3tPW' port=5432`, `S3cr'3tPW`},
		{`host=h password=S3cr\ 3tPW`, `S3cr 3tPW`},
		{"host=h\tpassword\t=\tS3cr3tPW", "S3cr3tPW"},
		{"password=S3cr3tPW", "S3cr3tPW"},
		{"password='S3cr3tPW", "S3cr3tPW"}, // unterminated quote
	} {
		out := Redact(tc.in)
		if strings.Contains(out, tc.secret) {
			t.Errorf("Redact(%q) = %q: shows the password", tc.in, out)
		}
		if !strings.Contains(out, Mask) {
			t.Errorf("Redact(%q) = %q: no mask", tc.in, out)
		}
		// An error text that quotes the value decoded must not show it either.
		msg := "cannot parse: password " + tc.secret + " is wrong"
		if got := Scrub(msg, Secrets(tc.in)); strings.Contains(got, tc.secret) {
			t.Errorf("Scrub(%q) = %q", msg, got)
		}
	}
	for _, keep := range []string{"host=h port=5432 user=u", "postgres://u@h/db?sslmode=disable", ""} {
		if got := Redact(keep); got != keep {
			t.Errorf("Redact(%q) = %q: changed a string with no password", keep, got)
		}
	}
}

// TestRedactInPlace: Redact works on whole messages: each password masked where it
// stands, in every connection string of the text, and nothing else touched (a short
// password does not mask its letters elsewhere).
func TestRedactInPlace(t *testing.T) {
	for in, want := range map[string]string{
		`unexpected argument "postgres://u:pw@h/x"`:       `unexpected argument "postgres://u:xxxxx@h/x"`,
		"POSTGRESQL://user:p%40ss@h:5432/db?sslmode=off":  "POSTGRESQL://user:xxxxx@h:5432/db?sslmode=off",
		"postgres://u:p@ss/w@h/db?application_name=a@b":   "postgres://u:xxxxx@h/db?application_name=a@b",
		"postgres://u@h/db and postgres://h/db":           "postgres://u@h/db and postgres://h/db",
		"postgres://h/db?password=s3cret&sslmode=require": "postgres://h/db?password=xxxxx",
		"host=h password=s3cret user=u":                   "host=h password=xxxxx user=u",
		"host=h password = s3cret user=u":                 "host=h password = xxxxx user=u",
		`host=h password='s3 \'cr\\et' user=u`:            "host=h password=xxxxx user=u",
		`host=h password='unterminated user=u`:            "host=h password=xxxxx",
		`host=h password=a\ b user=u`:                     "host=h password=xxxxx user=u",
		"sslpassword=k PGPASSWORD=p":                      "sslpassword=xxxxx PGPASSWORD=xxxxx",
		"password authentication failed for user \"bob\"": "password authentication failed for user \"bob\"",
		"password=": "password=",
		"a postgres://u:pw1@h/x b postgresql://v:pw2@h c postgres://w@h": "a postgres://u:xxxxx@h/x b postgresql://v:xxxxx@h c postgres://w@h",
		"see https://example.com/x, then postgres://u:p@h/x":             "see https://example.com/x, then postgres://u:xxxxx@h/x",
		"postgres://u:S3cr 3tPw@h/x is not a URL":                        "postgres://u:xxxxx@h/x is not a URL",
		"postgres://postgres:postgres@localhost/postgres":                "postgres://postgres:xxxxx@localhost/postgres",
		"postgres://h:5432/db, mail me@example.com":                      "postgres://h:5432/db, mail me@example.com",
		"password=p host=h and password=p2":                              "password=xxxxx host=h and password=xxxxx",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q)\n got %q\nwant %q", in, got, want)
		}
	}
}

// FuzzRedact: whatever the input, a password= value or URL userinfo password that the
// parser of record would see is not in the output.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"host=h password=pw", "postgres://u:pw@h/db", "password = 'a\\'b'", "postgres://u:p%41w@h?password=x"} {
		f.Add(s, "S3cr3tPW")
	}
	f.Fuzz(func(t *testing.T, prefix, pw string) {
		if !strings.Contains(prefix, "://") && !strings.Contains(strings.ToLower(prefix), "password") && Redact(prefix) != prefix {
			t.Fatalf("Redact(%q) = %q: changed a text with no connection string", prefix, Redact(prefix))
		}
		if strings.ContainsAny(pw, " \t\n\r\f\v'\\=@:/?&#%") || len(pw) < 4 || strings.Contains(prefix, pw) {
			t.Skip()
		}
		for _, s := range []string{prefix + " password=" + pw, prefix + " password = '" + pw + "'", "postgres://u:" + pw + "@h/" + prefix} {
			if strings.Contains(Redact(s), pw) && !strings.Contains(Mask, pw) {
				t.Fatalf("Redact(%q) shows %q: %q", s, pw, Redact(s))
			}
		}
	})
}
