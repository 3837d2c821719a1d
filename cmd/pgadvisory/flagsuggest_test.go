package main_test

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestUnknownFlagSuggestsTheNearest (issue 37, item 7): run --nmae said "flag provided but
// not defined: -nmae". It names the flag as written and the defined flag it most likely
// meant (a swap, a letter missing, added or changed); none when nothing is close.
func TestUnknownFlagSuggestsTheNearest(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--nmae", "x", "--", "true"}, "run: unknown flag --nmae; did you mean --name?"},
		{[]string{"run", "--wiat", "1s", "--name", "x", "--", "true"}, "run: unknown flag --wiat; did you mean --wait?"},
		{[]string{"run", "--slot", "2", "--name", "x", "--", "true"}, "run: unknown flag --slot; did you mean --slots?"},
		{[]string{"run", "--grcae", "1s", "--name", "x", "--", "true"}, "run: unknown flag --grcae; did you mean --grace?"},
		{[]string{"status", "--jsno"}, "status: unknown flag --jsno; did you mean --json?"},
		{[]string{"break", "--yse", "--name", "x"}, "break: unknown flag --yse; did you mean --yes?"},
		{[]string{"run", "--xyz", "--name", "x", "--", "true"}, "run: unknown flag --xyz\n"},
	} {
		r := noDB(t, tc.args...)
		assert.Equal(t, 64, r.code, "%q: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, "%q", tc.args)
		assert.NotContains(t, r.stderr, "flag provided but not defined", "%q", tc.args)
	}
}
