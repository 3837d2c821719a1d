package main_test

import (
	"encoding/json"
	"fmt"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestStatusKeyFindsALockTakenByName (issue 21, item 10): the number status prints in KEY,
// given back as --key, lists the lock taken by name, with its name. It once hashed the
// number as a name and answered "no advisory locks held or awaited", exit 0: a false
// "free".
func TestStatusKeyFindsALockTakenByName(t *testing.T) {
	t.Parallel()
	name := t.Name() + "/migrations"
	_, l := holdLock(t, name, "application_name=by-name")
	key := strconv.FormatInt(int64(l.Key()), 10)

	r := cli(t, "status", "--key", key)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, name)
	assert.Contains(t, r.stdout, "by-name")
	assert.Contains(t, r.stdout, "holding")
	assert.NotContains(t, r.stdout, "no advisory lock")

	r = cli(t, "status", "--json", "--key", key)
	require.Equal(t, 0, r.code, r.stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows), r.stdout)
	require.Len(t, rows, 1, r.stdout)
	assert.Equal(t, key, rows[0]["key"])
	assert.Equal(t, name, rows[0]["name"])
}

// TestStatusFilterThatMatchesNothingSaysWhatItLookedFor: never the unfiltered "none"
// sentence for a filtered listing; --json prints an empty array; exit 0 either way.
func TestStatusFilterThatMatchesNothingSaysWhatItLookedFor(t *testing.T) {
	t.Parallel()
	name := t.Name()
	key := int64(advisory.KeyOf(name))
	r := cli(t, "status", "--name", name)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, fmt.Sprintf("no advisory lock with key %d (name \"%s\") is held or awaited in this database\n",
		key, name), r.stdout)
	r = cli(t, "status", "--key", strconv.FormatInt(key, 10))
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, fmt.Sprintf("no advisory lock with key %d is held or awaited in this database", key))
	assert.Contains(t, r.stdout, "pg_advisory_lock(int4, int4)", "says that --key does not select pair locks")
	r = cli(t, "status", "--json", "--key", strconv.FormatInt(key, 10))
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, "[]", r.stdout)
}

// TestNameAndKeyMeanTheSameInEveryCommand: --name NAME and --key N (N the key of NAME) select
// the same lock in run, status and break; status --name was once an unknown flag and run
// --key a name.
func TestNameAndKeyMeanTheSameInEveryCommand(t *testing.T) {
	t.Parallel()
	name := t.Name()
	key := strconv.FormatInt(int64(advisory.KeyOf(name)), 10)
	holder := start(t, "run", "--key", key, "--holder-name", "keyed-holder", "--", "sleep", "600")
	m, err := advisory.New(t.Context(), dsn(t))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	waitHeldByApp(t, m, name, "keyed-holder")

	for _, sel := range [][]string{{"--name", name}, {"--key", key}} {
		r := cli(t, append(append([]string{"status"}, sel...), "--json")...)
		require.Equal(t, 0, r.code, "%q: %s", sel, r.stderr)
		assert.Contains(t, r.stdout, `"application_name": "keyed-holder"`, "%q", sel)
		r = cli(t, append(append([]string{"run", "--no-wait"}, sel...), "--", "true")...)
		assert.Equal(t, 75, r.code, "%q: the lock is held: %s", sel, r.stderr)
		assert.Contains(t, r.stderr, "keyed-holder", "%q names the holder", sel)
	}
	r := cli(t, "break", "--name", name, "--yes")
	require.Equal(t, 0, r.code, "stdout:\n%s\nstderr:\n%s", r.stdout, r.stderr)
	assert.Equal(t, 76, wait(t, holder).code, "the run that took the lock by key lost it")
}

// TestKeyThatIsNotANumberIsRefused: --key takes the 64-bit key; a name given there is a
// usage error that says what --key takes and how to write the name, in every command.
// run --key NAME once locked NAME; status --key NUMBER hashed the number.
func TestKeyThatIsNotANumberIsRefused(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"run", "--key", "migrations", "--", "true"},
		{"status", "--key", "migrations"},
		{"break", "--key", "migrations", "--yes"},
		{"status", "--key", "99999999999999999999"}, // past int64
	} {
		r := cli(t, args...)
		assert.Equal(t, 64, r.code, "%q: %s", args, r.stderr)
		assert.Contains(t, r.stderr, "--key takes the lock's 64-bit key (a number, as status prints it)", "%q", args)
		assert.Contains(t, r.stderr, fmt.Sprintf(`for the lock name "%s" write --name %s`, args[2], args[2]), "%q", args)
		assert.Empty(t, r.stdout, "%q", args)
	}
	r := cli(t, "run", "--key", "my lock", "--", "true")
	assert.Contains(t, r.stderr, `write --name 'my lock'`, "quoted for the shell")
	r = cli(t, "run", "--key", "-x", "--", "true")
	assert.Contains(t, r.stderr, `write --name=-x`)
}
