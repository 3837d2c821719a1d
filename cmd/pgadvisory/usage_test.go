package main_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestHelpGoesToStdoutAndExitsZero: --help and -h print the full help of the top level and
// of every command on stdout, and exit 0.
func TestHelpGoesToStdoutAndExitsZero(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string // in the help
	}{
		{[]string{"--help"}, []string{"Commands:", "run ", "status ", "break ", "hash ", "demo ", "init-fencing", "--dsn", "Exit codes:"}},
		{[]string{"-h"}, []string{"Commands:"}},
		{[]string{"help"}, []string{"Commands:"}},
		{[]string{"run", "--help"}, []string{"--name NAME", "--key KEY", "--wait DURATION", "--no-wait", "--grace", "--holder-name", "--dsn", "Exit codes:"}},
		{[]string{"run", "-h"}, []string{"--name NAME"}},
		{[]string{"run", "--help"}, []string{"--token", "--fence-table", "PGADVISORY_TOKEN", "PGADVISORY_KEY", "docs/run.md"}},
		{[]string{"run", "--help"}, []string{"--drain-wait", "PGAPPNAME", "PGOPTIONS", "PGADVISORY_APPNAME"}},
		{[]string{"run", "--help"}, []string{"--connect-timeout DURATION", "(default 30s;"}},
		{[]string{"status", "--help"}, []string{"--connect-timeout DURATION", "(default 0;"}},
		{[]string{"break", "--help"}, []string{"--connect-timeout DURATION"}},
		{[]string{"init-fencing", "--help"}, []string{"--connect-timeout DURATION"}},
		{[]string{"init-fencing", "--help"}, []string{"Usage: pgadvisory init-fencing", "--fence-table", "--dsn",
			"pair boolean", "primary key (key, pair)", "upgraded in place"}},
		{[]string{"help", "init-fencing"}, []string{"Usage: pgadvisory init-fencing"}},
		{[]string{"run", "--name", "k", "--help"}, []string{"--name NAME"}},
		{[]string{"help", "run"}, []string{"--name NAME"}},
		{[]string{"status", "--help"}, []string{"--json", "--name NAME", "--key KEY", "--dsn"}},
		{[]string{"status", "-h"}, []string{"--json"}},
		{[]string{"break", "--help"}, []string{"--key KEY", "--name NAME", "--yes", "--wait", "pg_signal_backend", "Exit codes:"}},
		{[]string{"help", "break"}, []string{"--key KEY"}},
		{[]string{"hash", "--help"}, []string{"Usage: pgadvisory hash NAME", "standard_conforming_strings"}},
		{[]string{"hash", "-h"}, []string{"Usage: pgadvisory hash NAME"}},
		{[]string{"demo", "--help"}, []string{"Usage: pgadvisory demo", "pg_terminate_backend", "SIGKILL"}},
		{[]string{"demo", "-h"}, []string{"Usage: pgadvisory demo"}},
	} {
		r := noDB(t, tc.args...)
		assert.Equal(t, 0, r.code, "%v: %s", tc.args, r.stderr)
		assert.Empty(t, r.stderr, "%v", tc.args)
		assert.Contains(t, r.stdout, "Usage", "%v", tc.args)
		for _, want := range tc.want {
			assert.Contains(t, r.stdout, want, "%v", tc.args)
		}
	}
}

// TestRunHelpHasTheExitCodeTable: one table, every code.
func TestRunHelpHasTheExitCodeTable(t *testing.T) {
	t.Parallel()
	r := noDB(t, "run", "--help")
	require.Equal(t, 0, r.code)
	table := r.stdout[strings.Index(r.stdout, "Exit codes:"):]
	for _, code := range []string{"0 ", "64 ", "69 ", "70 ", "75 ", "76 ", "77 ", "126 ", "127 ", "128+N ", "130, 143 "} {
		assert.Regexp(t, `(?m)^  `+regexp.QuoteMeta(code), table, "exit code %s", code)
	}
}

// TestRunHelpFitsAScreen (issue 37, item 7): run --help was 139 lines (flock's is 24), the
// flags and exit codes a user scans for buried in prose. It fits a screen of 48 lines and
// 92 columns, flags first, then the exit codes; the long form is docs/run.md, which
// exists and names every flag.
func TestRunHelpFitsAScreen(t *testing.T) {
	t.Parallel()
	r := noDB(t, "run", "--help")
	require.Equal(t, 0, r.code)
	lines := strings.Split(strings.TrimRight(r.stdout, "\n"), "\n")
	assert.LessOrEqual(t, len(lines), 48, r.stdout)
	for _, l := range lines {
		assert.LessOrEqual(t, len(l), 92, "%q", l)
	}
	flags, codes := strings.Index(r.stdout, "  --name NAME"), strings.Index(r.stdout, "Exit codes:")
	require.Positive(t, flags)
	assert.Less(t, flags, codes, "flags first, then exit codes")
	assert.Less(t, strings.Count(r.stdout[:flags], "\n"), 6, "the flags start on the first screenful's top")
	long, err := os.ReadFile("../../docs/run.md")
	require.NoError(t, err)
	for _, f := range []string{"--name", "--key", "--namespace", "--wait", "--no-wait", "--conflict-exit-code", "--shared",
		"--slots", "--token", "--fence-table", "--drain-wait", "--work-role", "--grace", "--at-least", "--holder-name", "--quiet", "--dsn", "--connect-timeout",
		"PGADVISORY_LOCK_FD", "PGADVISORY_TOKEN", "PGADVISORY_FENCE_TABLE", "FOR SHARE", "PR_SET_PDEATHSIG"} {
		assert.Contains(t, string(long), f, "docs/run.md")
		if f[0] == '-' {
			assert.Contains(t, r.stdout, "  "+f+" ", "run --help")
		}
	}
}

func TestVersion(t *testing.T) {
	t.Parallel()
	r := noDB(t, "--version")
	require.Equal(t, 0, r.code, r.stderr)
	assert.Regexp(t, `^pgadvisory (\(devel\)( [0-9a-f]{12}(\+dirty)?)?, after v\d+\.\d+\.\d+|v\S+)\n$`, r.stdout)
}

// TestUsageErrorsSayWhy: every usage error exits 64, says what is wrong and where the help
// is, and prints nothing on stdout.
func TestUsageErrorsSayWhy(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--wait", "10", "--name", "k", "--", "true"}, "--wait 10: missing unit: use a unit: 10s, 5m"},
		{[]string{"run", "--grace", "soon", "--name", "k", "--", "true"}, "--grace soon: not a duration"},
		{[]string{"run", "--no-wait=maybe", "--name", "k", "--", "true"}, "--no-wait maybe: not a boolean"},
		{[]string{"run", "--drain-wait", "-1s", "--name", "k", "--", "true"}, "run: --drain-wait -1s: want 0 (terminate at once) to 1h0m0s"},
		{[]string{"run", "--drain-wait", "2h", "--name", "k", "--", "true"}, "run: --drain-wait 2h0m0s: want 0"},
		{[]string{"run", "--work-role", "", "--name", "k", "--", "true"}, "--work-role : not a role name: want 1 to 63 bytes"},
		{[]string{"hash", "x", "y"}, "hash: takes exactly one NAME, got 2 arguments"},
		{[]string{"hash"}, "hash: takes exactly one NAME, got 0 arguments"},
		{[]string{"hash", ""}, "hash: advisory: invalid key: empty name"},
		// `--name $UNSET -- cmd`: the shell drops the empty word and "--" would be the name.
		{[]string{"run", "--name", "--", "true"}, "run: --name needs a value, not the flag --"},
		{[]string{"run", "--name", "--wait", "1s", "--", "true"}, "run: --name needs a value, not the flag --wait"},
		{[]string{"run", "--key", "--", "true"}, "run: --key needs a value, not the flag --"},
		{[]string{"run", "--name", "", "--", "true"}, "run: --name is empty"},
		{[]string{"run", "--key", "", "--", "true"}, "run: --key is empty"},
		{[]string{"run", "--", "true"}, "run: give the lock: --name NAME (its name) or --key KEY"},
		{[]string{"run", "--name", "k"}, "run: no command given"},
		{[]string{"status", "--name", ""}, "status: --name is empty"},
		{[]string{"status", "--name", "bad\xff"}, "status: --name: advisory: invalid key: name is not valid UTF-8"},
		{[]string{"status", "--name", "a", "--key", "1"}, "status: give one of --name NAME and --key KEY, not both"},
		{[]string{"break", "--name", "a", "--key", "1"}, "break: give one of --name NAME and --key KEY, not both"},
		{[]string{"break", "--yes"}, "break: give the lock: --name NAME (its name) or --key KEY"},
		{[]string{"status", "extra"}, `status: unexpected argument "extra"`},
		{[]string{"demo", "extra"}, `demo: unexpected argument "extra"`},
		{[]string{"--bogus", "status"}, "unknown flag --bogus before the command"},
		{[]string{"--dsn"}, "--dsn needs a value"},
		{[]string{"nosuchcommand"}, `unknown command "nosuchcommand"`},
		{[]string{}, "no command given"},
		{[]string{"help", "nosuch"}, "help takes one of run, status, break, hash, demo"},
	} {
		r := noDB(t, tc.args...)
		assert.Equal(t, 64, r.code, "%q: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, "%q", tc.args)
		assert.Contains(t, r.stderr, "--help' for usage.", "%q", tc.args)
		assert.Empty(t, r.stdout, "%q", tc.args)
	}
}

// TestConnectionFlagBeforeTheCommand: the help lists --dsn as a global flag, so it works
// there too (and after the command, where it wins).
func TestConnectionFlagBeforeTheCommand(t *testing.T) {
	t.Parallel()
	d := dsn(t)
	env := []string{"DATABASE_URL="}
	r := wait(t, startEnv(t, env, "--dsn", d, "status", "--json"))
	assert.Equal(t, 0, r.code, r.stderr)
	r = wait(t, startEnv(t, env, "--dsn="+d, "run", "--name", t.Name(), "--", "true"))
	assert.Equal(t, 0, r.code, r.stderr)
	r = wait(t, startEnv(t, env, "--dsn", "postgres://nobody@127.0.0.1:1/x?connect_timeout=2", "status", "--dsn", d))
	assert.Equal(t, 0, r.code, "the command's own --dsn wins: %s", r.stderr)
	r = wait(t, startEnv(t, env, "--dsn", d, "hash", "k"))
	assert.Equal(t, 0, r.code, "commands that do not connect accept it too: %s", r.stderr)
}
