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

// FuzzRedact: whatever the input, a password= value or URL userinfo password that the
// parser of record would see is not in the output.
func FuzzRedact(f *testing.F) {
	for _, s := range []string{"host=h password=pw", "postgres://u:pw@h/db", "password = 'a\\'b'", "postgres://u:p%41w@h?password=x"} {
		f.Add(s, "S3cr3tPW")
	}
	f.Fuzz(func(t *testing.T, prefix, pw string) {
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
