package sqlscan

import "strings"

// scanner reads tokens from src, from pos on.
type scanner struct {
	src string
	pos int
}

// next returns the next token, skipping white space and comments; false at the end.
func (s *scanner) next() (Token, bool) {
	s.skip()
	if s.pos >= len(s.src) {
		return Token{}, false
	}
	c := s.src[s.pos]
	switch {
	case c == '\'':
		return s.quoted('\'', false, String), true
	case c == '"':
		return s.quoted('"', false, Ident), true
	case c == '$':
		return s.dollar(), true
	case isDigit(c) || (c == '.' && s.pos+1 < len(s.src) && isDigit(s.src[s.pos+1])):
		return s.number(), true
	case isIdentStart(c):
		return s.word(), true
	}
	s.pos++
	return Token{Kind: Punct, Text: string(c)}, true
}

// skip skips white space and comments.
func (s *scanner) skip() {
	for s.pos < len(s.src) {
		switch c := s.src[s.pos]; {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			s.pos++
		case strings.HasPrefix(s.src[s.pos:], "--"):
			if i := strings.IndexByte(s.src[s.pos:], '\n'); i >= 0 {
				s.pos += i + 1
			} else {
				s.pos = len(s.src)
			}
		case strings.HasPrefix(s.src[s.pos:], "/*"):
			s.blockComment()
		default:
			return
		}
	}
}

// blockComment skips a /* */ comment, which nests in PostgreSQL.
func (s *scanner) blockComment() {
	depth := 0
	for s.pos < len(s.src) {
		switch {
		case strings.HasPrefix(s.src[s.pos:], "/*"):
			depth++
			s.pos += 2
		case strings.HasPrefix(s.src[s.pos:], "*/"):
			depth--
			s.pos += 2
			if depth == 0 {
				return
			}
		default:
			s.pos++
		}
	}
}

// quoted reads a literal or identifier quoted with q, in which q doubled stands for
// itself, and with backslash escapes if backslash (an E” string).
func (s *scanner) quoted(q byte, backslash bool, k Kind) Token {
	var b strings.Builder
	s.pos++ // the opening quote
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		switch {
		case backslash && c == '\\' && s.pos+1 < len(s.src):
			b.WriteByte(s.src[s.pos+1])
			s.pos += 2
			continue
		case c == q && s.pos+1 < len(s.src) && s.src[s.pos+1] == q:
			b.WriteByte(q)
			s.pos += 2
			continue
		case c == q:
			s.pos++
			return Token{Kind: k, Text: b.String()}
		}
		b.WriteByte(c)
		s.pos++
	}
	return Token{Kind: k, Text: b.String()}
}

// dollar reads a parameter ($1), a dollar-quoted string ($$...$$, $tag$...$tag$), or a
// lone "$" as punctuation.
func (s *scanner) dollar() Token {
	start := s.pos
	i := s.pos + 1
	if i < len(s.src) && isDigit(s.src[i]) {
		for i < len(s.src) && isDigit(s.src[i]) {
			i++
		}
		s.pos = i
		return Token{Kind: Param, Text: s.src[start:i]}
	}
	for i < len(s.src) && isIdentPart(s.src[i]) && s.src[i] != '$' {
		i++
	}
	if i >= len(s.src) || s.src[i] != '$' {
		s.pos++
		return Token{Kind: Punct, Text: "$"}
	}
	tag := s.src[start : i+1]
	body := i + 1
	if end := strings.Index(s.src[body:], tag); end >= 0 {
		s.pos = body + end + len(tag)
		return Token{Kind: String, Text: s.src[body : body+end]}
	}
	s.pos = len(s.src)
	return Token{Kind: String, Text: s.src[body:]}
}

// number reads a numeric literal (digits, a point, an exponent; loosely).
func (s *scanner) number() Token {
	start := s.pos
	for s.pos < len(s.src) {
		c := s.src[s.pos]
		if isDigit(c) || c == '.' || c == '_' || c == 'e' || c == 'E' || c == 'x' || c == 'X' ||
			((c == '+' || c == '-') && (s.src[s.pos-1] == 'e' || s.src[s.pos-1] == 'E')) {
			s.pos++
			continue
		}
		break
	}
	return Token{Kind: Number, Text: s.src[start:s.pos]}
}

// word reads a keyword or identifier, or a prefixed literal: E'...' (backslash
// escapes), U&'...' and U&"..." (Unicode escapes, read loosely), B'...' and X'...'.
func (s *scanner) word() Token {
	start := s.pos
	for s.pos < len(s.src) && isIdentPart(s.src[s.pos]) {
		s.pos++
	}
	w := strings.ToLower(s.src[start:s.pos])
	if s.pos < len(s.src) {
		switch c := s.src[s.pos]; {
		case c == '\'' && (w == "e"):
			return s.quoted('\'', true, String)
		case c == '\'' && (w == "b" || w == "x" || w == "n"):
			return s.quoted('\'', false, String)
		case w == "u" && strings.HasPrefix(s.src[s.pos:], "&'"):
			s.pos++
			return s.quoted('\'', false, String)
		case w == "u" && strings.HasPrefix(s.src[s.pos:], "&\""):
			s.pos++
			return s.quoted('"', false, Ident)
		}
	}
	return Token{Kind: Word, Text: w}
}

func isDigit(c byte) bool      { return c >= '0' && c <= '9' }
func isIdentStart(c byte) bool { return c == '_' || c >= 0x80 || (c|0x20 >= 'a' && c|0x20 <= 'z') }
func isIdentPart(c byte) bool  { return isIdentStart(c) || isDigit(c) || c == '$' }
