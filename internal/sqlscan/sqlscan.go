// Package sqlscan splits PostgreSQL SQL text into statements and each statement into
// tokens, as the server's lexer would for the purpose of telling what kind of statement
// each is: words (keywords and unquoted identifiers, lower-cased), quoted identifiers,
// literals, parameters and punctuation. Comments (-- and nested /* */), string literals
// ('...', E'...' with backslash escapes, U&'...'), quoted identifiers and dollar-quoted
// strings ($tag$...$tag$) are skipped as wholes, so a semicolon or a keyword inside one
// never counts. Unterminated constructs run to the end of the text, as the server would
// reject them anyway.
//
// It knows nothing of what the statements mean; it never fails and never panics.
package sqlscan

// Kind is the kind of a Token.
type Kind uint8

// The kinds of Token.
const (
	Word   Kind = iota // a keyword or unquoted identifier, lower-cased
	Ident              // a quoted identifier, its text unquoted
	String             // a string literal of any form, dollar-quoted included
	Number             // a numeric literal
	Param              // a positional parameter: $1
	Punct              // one character of punctuation or an operator character
)

// A Token is one lexical element of a statement.
type Token struct {
	Kind Kind
	Text string
}

// A Statement is the tokens of one statement, in order; never empty.
type Statement []Token

// Split returns the statements of sql, in order, without the empty ones (a text of only
// comments and semicolons has none).
func Split(sql string) []Statement {
	var out []Statement
	var cur Statement
	s := scanner{src: sql}
	for {
		t, ok := s.next()
		if !ok {
			break
		}
		if t.Kind == Punct && t.Text == ";" {
			if len(cur) > 0 {
				out = append(out, cur)
			}
			cur = nil
			continue
		}
		cur = append(cur, t)
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
}

// Words returns the first n tokens of st that are words, up to the first token that is
// not one: the words that name what kind of statement it is ("set", "local", ...).
func (st Statement) Words(n int) []string {
	var out []string
	for _, t := range st {
		if t.Kind != Word || len(out) == n {
			break
		}
		out = append(out, t.Text)
	}
	return out
}

// Call is one function call found in a statement: its name (the last part of a
// qualified name, lower-cased unless quoted) and its arguments' tokens at the top level
// of its parentheses, split at their commas.
type Call struct {
	Name string
	Args []Statement
}

// Calls returns every call in st: a word or quoted identifier followed by "(". Nested
// calls are returned too, after the call that contains them.
func (st Statement) Calls() []Call {
	var out []Call
	for i := 0; i+1 < len(st); i++ {
		t := st[i]
		if (t.Kind != Word && t.Kind != Ident) || st[i+1].Kind != Punct || st[i+1].Text != "(" {
			continue
		}
		out = append(out, Call{Name: t.Text, Args: args(st[i+2:])})
	}
	return out
}

// args splits the tokens after a call's "(" into its arguments, up to the matching ")".
func args(st Statement) []Statement {
	var out []Statement
	var cur Statement
	depth := 0
	for _, t := range st {
		if t.Kind == Punct {
			switch {
			case t.Text == "(" || t.Text == "[":
				depth++
			case (t.Text == ")" || t.Text == "]") && depth > 0:
				depth--
			case t.Text == ")":
				return append(out, cur)
			case t.Text == "," && depth == 0:
				out, cur = append(out, cur), nil
				continue
			}
		}
		cur = append(cur, t)
	}
	return append(out, cur)
}
