package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSQLLiteral(t *testing.T) {
	for in, want := range map[string]string{
		"migrations":       "'migrations'",
		"it's":             "'it''s'",
		`back\slash`:       `E'back\\slash'`,
		"a\nb":             `E'a\x0ab'`,
		"esc\x1b5":         `E'esc\x1b5'`,
		"it's\tüber\u202e": `E'it''s\x09über\u202e'`,
		"\U000e0001":       `E'\U000e0001'`,
	} {
		assert.Equal(t, want, sqlLiteral(in), "%q", in)
	}
}

func TestTerminalSafeJSON(t *testing.T) {
	in := []string{"\x1b]0;x\a", "del\x7f", "c1\u0085", "bidi\u202e\u2066", "tag\U000e0001", "plain é"}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	safe := terminalSafeJSON(b)
	requireTerminalSafe(t, string(safe))
	var back []string
	require.NoError(t, json.Unmarshal(safe, &back), "%s", safe)
	assert.Equal(t, in, back, "the values are exact")
	assert.True(t, strings.Contains(string(safe), "plain é"), "printable text is left alone")
}
