package main_test

import (
	"context"
	"encoding/json"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/pgadvisory/advisory"
)

// TestNamespaceSeparatesLocks (issue 23, item 8): --namespace NS --name NAME is the lock
// the library's WithNamespace(NS) takes for NAME, "NS:NAME": run in namespaces a and b do
// not exclude each other, while a library Manager in namespace a finds the lock held;
// status and break with the same namespace find it, hash prints its key.
func TestNamespaceSeparatesLocks(t *testing.T) {
	t.Parallel()
	name := t.Name()
	holder := start(t, "run", "--namespace", "a", "--name", name, "--", "sh", "-c", "echo up; exec sleep 60")
	holder.stdout.waitFor(t, "up", 20*time.Second)

	r := cli(t, "run", "--no-wait", "--namespace", "b", "--name", name, "--", "echo", "b ran")
	assert.Equal(t, 0, r.code, "namespace b is another lock: %s", r.stderr)
	assert.Equal(t, "b ran\n", r.stdout)
	r = cli(t, "run", "--no-wait", "--name", name, "--", "true")
	assert.Equal(t, 0, r.code, "no namespace is another lock too: %s", r.stderr)
	r = cli(t, "run", "--no-wait", "--namespace", "a", "--name", name, "--", "true")
	assert.Equal(t, 75, r.code, r.stderr)
	assert.Contains(t, r.stderr, `lock "a:`+name+`" is held by`)

	m, err := advisory.New(context.Background(), dsn(t), advisory.WithNamespace("a"))
	require.NoError(t, err)
	t.Cleanup(m.Close)
	_, err = m.TryLock(context.Background(), name)
	require.ErrorIs(t, err, advisory.ErrLocked, "the library's namespace a is the same lock")
	hs, err := m.Holders(context.Background(), name)
	require.NoError(t, err)
	require.Len(t, hs, 1)

	r = cli(t, "status", "--json", "--namespace", "a", "--name", name)
	require.Equal(t, 0, r.code, r.stderr)
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(r.stdout), &rows), r.stdout)
	require.Len(t, rows, 1, r.stdout)
	assert.Equal(t, "a:"+name, rows[0]["name"])
	assert.Equal(t, strconv.FormatInt(int64(advisory.KeyOf("a:"+name)), 10), rows[0]["key"])
	assert.EqualValues(t, hs[0].PID, rows[0]["pid"])
	r = cli(t, "status", "--json", "--namespace", "b", "--name", name)
	require.Equal(t, 0, r.code, r.stderr)
	assert.JSONEq(t, "[]", r.stdout)

	r = noDB(t, "hash", "--namespace", "a", name)
	require.Equal(t, 0, r.code, r.stderr)
	assert.Contains(t, r.stdout, strconv.FormatInt(int64(advisory.KeyOf("a:"+name)), 10)+"\n")

	r = cli(t, "break", "--namespace", "a", "--name", name, "--yes")
	assert.Equal(t, 0, r.code, r.stderr)
	assert.Equal(t, 76, wait(t, holder).code, "the holder in namespace a lost its lock to break")
}

// TestNamespaceUsage: --namespace takes what WithNamespace takes, and only with --name.
func TestNamespaceUsage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--namespace", "a:b", "--name", "x", "--", "true"}, `run: --namespace "a:b": want valid UTF-8`},
		{[]string{"run", "--namespace", "", "--name", "x", "--", "true"}, "run: --namespace is empty"},
		{[]string{"run", "--namespace", "a", "--key", "1", "--", "true"}, "run: --namespace goes with --name"},
		{[]string{"status", "--namespace", "a"}, "status: --namespace goes with --name"},
		{[]string{"status", "--namespace", "bad\xff", "--name", "x"}, "status: --namespace"},
		{[]string{"break", "--namespace", "a\xffb", "--name", "x"}, "break: --namespace"},
		{[]string{"hash", "--namespace", "a:b", "x"}, `hash: --namespace "a:b"`},
		{[]string{"hash", "--namespace=", "x"}, "hash: --namespace is empty"},
	} {
		r := noDB(t, tc.args...)
		assert.Equal(t, 64, r.code, "%q: %s", tc.args, r.stderr)
		assert.Contains(t, r.stderr, tc.want, "%q", tc.args)
		assert.Empty(t, r.stdout, "%q", tc.args)
	}
}
