package advisory

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
)

// TestTxBeginSettingsAsSetLocal (issue 47): a holding transaction carries its settings as
// SET LOCAL statements after BEGIN, each its own statement before the lock's (so that
// statement_timeout and client_connection_check_interval, armed as a statement starts,
// govern the wait), not as a SELECT of set_config, which the server plans, snapshots and
// answers with a row.
func TestTxBeginSettingsAsSetLocal(t *testing.T) {
	t.Parallel()
	set := defaultSettings()
	pg15 := "BEGIN; SET LOCAL tcp_keepalives_idle = '10'; SET LOCAL tcp_keepalives_interval = '5'; " +
		"SET LOCAL tcp_keepalives_count = '4'; SET LOCAL tcp_user_timeout = '30000'; SET LOCAL lock_timeout = '0'; " +
		"SET LOCAL statement_timeout = '0'; SET LOCAL idle_in_transaction_session_timeout = '0'; " +
		"SET LOCAL client_connection_check_interval = '1000'; "
	assert.Equal(t, pg15, txBeginSQL(&set, 150000))
	assert.Equal(t, pg15+"SET LOCAL transaction_timeout = '0'; ", txBeginSQL(&set, 170000))
	pg13 := txBeginSQL(&set, 130000)
	assert.NotContains(t, pg13, "client_connection_check_interval", "PostgreSQL 13 has no such setting")
	set.heartbeat = 2 * time.Second
	assert.Contains(t, txBeginSQL(&set, 150000), "SET LOCAL lock_timeout = '2000ms'; ", "a wait's slice")
	st := txStatements(txBeginSQL(&set, 150000), "", 42, false, false)
	for _, sql := range []string{st.lock, st.tryLock} {
		assert.True(t, strings.HasPrefix(sql, "BEGIN; SET LOCAL "), sql)
		assert.NotContains(t, sql, "set_config", sql)
		assert.Equal(t, 1, strings.Count(sql, "SELECT"), "the lock's statement is the message's only SELECT: %s", sql)
	}
}

// TestTxTextsOfANameBuiltOnce (issue 47): a transaction holding's Lock of a name locked
// before builds no text (each of its two texts carries BEGIN and the settings, about 500
// bytes), and the cached texts are those txStatements builds, for that name's key: two
// keys under one name (a Semaphore's slots are named locks of their own, but a target's
// name and key are kept apart) never share a text.
func TestTxTextsOfANameBuiltOnce(t *testing.T) { // not parallel: AllocsPerRun
	set := defaultSettings()
	m := &Manager{set: set, lease: txLease{}, txBegin: txBeginSQL(&set, 150000)}
	named := target{key: KeyOf("orders"), name: "orders"}
	for _, tg := range []target{named, {key: 7, name: "orders"}, {key: named.key, name: "orders", shared: true},
		{key: 9}} {
		want := txStatements(m.txBegin, tg.name, tg.key, tg.shared, tg.pair)
		for range 2 {
			assert.Equal(t, want, m.lease.statements(m, tg, false), "%+v", tg)
		}
	}
	allocs := testing.AllocsPerRun(100, func() { _ = m.lease.statements(m, named, false) })
	assert.Zero(t, allocs, "a Lock of a name locked before builds its texts again")
	long := target{key: 1, name: strings.Repeat("x", maxCachedNameLen+1)}
	m.lease.statements(m, long, false)
	assert.Len(t, m.texts.txm, 3, "a name past the bound, or none, is built per call")
}
