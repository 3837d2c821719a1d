package advisory

import (
	"context"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestWithoutNamesInActivity checks, on the server, a Manager made WithoutNamesInActivity
// beside a default one: its named locks send the statements LockKey sends, so the
// session never shows the name (a Lock holding and waiting, a Do after its drain, a
// Session's Lock, a Token), yet they are the same locks as the default Manager's (each excludes
// the other), and the process keeps the name (Lock.Name, the Acquired hook). Holders
// names its sessions from the default Manager's session of the same key, and names none
// while no session shows the name.
func TestWithoutNamesInActivity(t *testing.T) {
	ctx, dsn, admin := serverConn(t)
	var mu sync.Mutex
	var hooked []string
	table := "fence_" + KeyOf(t.Name()).String()
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP TABLE IF EXISTS "+pgx.Identifier{table}.Sanitize()) })
	quiet, err := New(ctx, dsn, WithoutNamesInActivity(), WithFenceTable(table), WithHooks(Hooks{Acquired: func(ev LockEvent) {
		mu.Lock()
		defer mu.Unlock()
		hooked = append(hooked, ev.Name)
	}}))
	require.NoError(t, err)
	t.Cleanup(quiet.Close)
	require.NoError(t, quiet.CreateFenceTable(ctx))
	loud, err := New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(loud.Close)
	name := t.Name()
	key := KeyOf(name)
	holders := func() []Holder {
		hs, err := loud.Holders(ctx, name)
		require.NoError(t, err)
		return hs
	}
	// noName asserts that the backend's last statement carries no name, and returns it.
	noName := func(pid uint32, what string) string {
		q := lastQuery(t, ctx, admin, pid)
		assert.NotContains(t, q, commentPrefix, "%s: the session shows no name", what)
		assert.NotContains(t, q, name, what)
		return q
	}

	// The quiet Manager holds: the lock statement by key, as LockKey's.
	l1, err := quiet.Lock(ctx, name)
	require.NoError(t, err)
	assert.Equal(t, name, l1.Name(), "the process keeps the name")
	assert.Equal(t, key, l1.Key())
	assert.Equal(t, baseStatements[b2i(l1.s.st.direct)][0][0].lock, noName(l1.PID(), "a holder"))
	assert.Equal(t, []uint32{l1.PID()}, heldBy(t, ctx, admin, key))
	hs := holders()
	require.Len(t, hs, 1)
	assert.Equal(t, Holder{Key: key, Granted: true, PID: l1.PID()},
		Holder{Key: hs[0].Key, Name: hs[0].Name, Granted: hs[0].Granted, PID: hs[0].PID},
		"no session shows the name: Holders cannot give it")

	// The same lock as the default Manager's.
	_, err = loud.TryLock(ctx, name)
	var locked *LockedError
	require.ErrorAs(t, err, &locked)

	// The default Manager waits, showing the name: Holders names the quiet holder by it.
	got := make(chan *Lock, 1)
	go func() {
		l, err := loud.Lock(ctx, name)
		assert.NoError(t, err)
		got <- l
	}()
	w, hs := awaitWaiter(t, name, holders)
	require.Len(t, hs, 2)
	assert.Equal(t, name, w.Name, "the default Manager's waiter shows its name")
	assert.Equal(t, l1.PID(), hs[0].PID)
	assert.Equal(t, name, hs[0].Name, "the quiet holder is named by the waiter of its key")
	require.NoError(t, l1.Unlock(ctx))
	l2 := <-got
	require.NotNil(t, l2)

	// The quiet Manager waits, by key: Holders names it by the default holder.
	go func() {
		l, err := quiet.Lock(ctx, name)
		assert.NoError(t, err)
		got <- l
	}()
	w, hs = awaitWaiter(t, name, holders)
	require.Len(t, hs, 2)
	assert.Equal(t, l2.PID(), hs[0].PID)
	assert.Equal(t, name, hs[0].Name)
	assert.Equal(t, name, w.Name, "the quiet waiter is named by the holder of its key")
	noName(w.PID, "a waiter")
	require.NoError(t, l2.Unlock(ctx))
	l3 := <-got
	require.NotNil(t, l3)
	assert.Equal(t, []uint32{l3.PID()}, heldBy(t, ctx, admin, key))
	_, err = l3.Token(ctx)
	require.NoError(t, err)
	assert.Contains(t, noName(l3.PID(), "a holder after Token"), table, "the token's statement ran last")
	require.NoError(t, l3.Unlock(ctx))

	// Do drains first, on the lock's connection: that statement shows no name either.
	require.NoError(t, quiet.Do(ctx, name, func(context.Context) error {
		pids := heldBy(t, ctx, admin, key)
		require.Len(t, pids, 1)
		assert.Contains(t, noName(pids[0], "a Do after its drain"), "pg_stat_activity", "the drain ran last")
		return nil
	}))

	// A Session's Lock of the name.
	s, err := quiet.Session(ctx)
	require.NoError(t, err)
	require.NoError(t, s.Lock(ctx, name))
	pids := heldBy(t, ctx, admin, key)
	require.Len(t, pids, 1)
	noName(pids[0], "a Session's lock")
	require.NoError(t, s.Close(ctx))
	assert.Empty(t, heldBy(t, ctx, admin, key))

	mu.Lock()
	defer mu.Unlock()
	assert.Equal(t, []string{name, name, name}, hooked, "the hooks hear the name")
}

// TestNameByKey checks which sessions Holders names from another session of their key:
// those of the same key and form that show no name, by a whole name only.
func TestNameByKey(t *testing.T) {
	a, b := KeyOf("a"), KeyOf("b")
	hs := []Holder{
		{Key: a, Granted: true, PID: 1},                        // by key: named from pid 2
		{Key: a, Name: "a", PID: 2},                            // shows it
		{Key: a, PID: 3},                                       // waits by key: named too
		{Key: a, Pair: true, PID: 4},                           // the two-int4 form: another lock
		{Key: b, Granted: true, PID: 5},                        // no session of b shows a whole name
		{Key: b, Name: "b-start", NameTruncated: true, PID: 6}, // a start is not passed on
		{Key: KeyOf("c"), PID: 7},                              // alone
	}
	nameByKey(hs)
	var got []string
	for _, h := range hs {
		got = append(got, h.Name)
	}
	assert.Equal(t, []string{"a", "a", "a", "", "", "b-start", ""}, got)
	assert.False(t, hs[4].NameTruncated)
}
