package main

import (
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/pgadvisory/advisory/internal/connstr"
)

// escape makes an untrusted string safe to print on a terminal: lock names, application
// names, client addresses, arguments, server and driver messages. It is the one escaping
// function of every human-readable output of pgadvisory.
//
// Printable characters pass through, except the backslash, which is doubled. Everything
// else is written as a Go escape: \n, \t, \r and the other C escapes, \xNN for the other
// C0 controls, DEL and bytes that are not valid UTF-8, \uNNNN or \UNNNNNNNN for every other
// rune that is not printable (C1 controls, bidirectional overrides and isolates, zero-width
// and format characters, non-ASCII spaces, line and paragraph separators). So the result is
// valid UTF-8 free of controls, and the escaping is reversible: different inputs print
// differently. Double quotes are left alone so that messages can quote names.
func escape(s string) string {
	if safeAsIs(s) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\\':
			b.WriteString(`\\`)
		case printable(r):
			b.WriteString(s[i : i+size])
		default:
			b.WriteString(escapeRune(r))
		}
		i += size
	}
	return b.String()
}

// printable reports whether r may reach a terminal as it is: a graphic character or the
// ASCII space ([unicode.IsPrint]). Controls, format characters such as U+202E, and spaces
// other than U+0020 are not.
func printable(r rune) bool {
	return unicode.IsPrint(r)
}

// escapeRune is the escape sequence of a rune that is not printable.
func escapeRune(r rune) string {
	switch r {
	case '\a':
		return `\a`
	case '\b':
		return `\b`
	case '\f':
		return `\f`
	case '\n':
		return `\n`
	case '\r':
		return `\r`
	case '\t':
		return `\t`
	case '\v':
		return `\v`
	}
	switch {
	case r < 0x20 || r == 0x7f:
		return fmt.Sprintf(`\x%02x`, r)
	case r <= 0xffff:
		return fmt.Sprintf(`\u%04x`, r)
	}
	return fmt.Sprintf(`\U%08x`, r)
}

// safeAsIs is the fast path of escape: plain printable ASCII without a backslash.
func safeAsIs(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '\\' {
			return false
		}
	}
	return true
}

// display is what every human-readable line of pgadvisory goes through: passwords
// masked where they stand (connstr.Redact), then escaped (see escape).
func display(s string) string {
	return escape(connstr.Redact(s))
}
